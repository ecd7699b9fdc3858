//! `TailAudit`: the newest audit entries, then (with `follow`) new ones as they are applied.

use super::convert::replica_status;
use crate::replica::Replica;
use crate::state::AllocatorState;
use leasehold_proto::leasehold::v1 as pb;
use std::time::Duration;
use tonic::Status;

/// Audit entries sent per poll of a followed tail, and the poll interval.
const AUDIT_BATCH_MAX: usize = 256;
const AUDIT_POLL_MS: u64 = 200;

pub fn tail<R: Replica<AllocatorState>>(
    replica: R,
    r: pb::TailAuditRequest,
) -> tokio_stream::wrappers::ReceiverStream<Result<pb::AuditEntry, Status>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let limit = if r.limit == 0 { 20 } else { r.limit as usize };
        let mut after = r.after_seq;
        let mut first = true;
        loop {
            let (rr, tail) = (r.clone(), first);
            let batch = replica
                .read(move |s| {
                    let matching: Vec<pb::AuditEntry> = s
                        .audit()
                        .filter(|e| e.seq > after)
                        .filter(|e| rr.actor.is_empty() || e.actor == rr.actor)
                        .filter(|e| {
                            rr.target_prefix.is_empty() || e.target.starts_with(&rr.target_prefix)
                        })
                        .map(|e| pb::AuditEntry {
                            seq: e.seq,
                            at_ms: e.at_ns / 1_000_000,
                            actor: e.actor.clone(),
                            action: e.action.clone(),
                            target: e.target.clone(),
                            before: e.before.clone(),
                            after: e.after.clone(),
                            content_type: "text/plain".into(),
                            reason: e.reason.clone(),
                        })
                        .collect();
                    // The first batch is the newest `limit` entries; later ones everything new.
                    let skip = if tail {
                        matching.len().saturating_sub(limit)
                    } else {
                        0
                    };
                    matching
                        .into_iter()
                        .skip(skip)
                        .take(AUDIT_BATCH_MAX)
                        .collect::<Vec<_>>()
                })
                .await;
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(replica_status(e))).await;
                    return;
                }
            };
            first = false;
            for e in batch {
                after = e.seq;
                if tx.send(Ok(e)).await.is_err() {
                    return;
                }
            }
            if !r.follow || tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(AUDIT_POLL_MS)).await;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
