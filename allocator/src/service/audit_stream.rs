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
        // The newest `limit` entries first, in pages, oldest first; then (following) new ones.
        let mut after = None;
        let mut left = limit;
        loop {
            let rr = r.clone();
            let batch = replica.read(move |s| page(s, &rr, after, limit)).await;
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(replica_status(e))).await;
                    return;
                }
            };
            let full = batch.len() == AUDIT_BATCH_MAX;
            let mut last = after.unwrap_or(r.after_seq);
            for e in batch {
                if !r.follow && left == 0 {
                    return;
                }
                left = left.saturating_sub(1);
                last = e.seq;
                if tx.send(Ok(e)).await.is_err() {
                    return;
                }
            }
            after = Some(last);
            if full {
                continue;
            }
            if !r.follow || tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(AUDIT_POLL_MS)).await;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Up to [`AUDIT_BATCH_MAX`] matching entries after `after`; the first page (`after` is
/// `None`) starts at the newest `limit` matching entries after the request's `after_seq`.
fn page(
    s: &AllocatorState,
    r: &pb::TailAuditRequest,
    after: Option<u64>,
    limit: usize,
) -> Vec<pb::AuditEntry> {
    let from = after.unwrap_or(r.after_seq);
    let matching = || {
        s.audit()
            .filter(move |e| e.seq > from)
            .filter(|e| r.actor.is_empty() || e.actor == r.actor)
            .filter(|e| r.target_prefix.is_empty() || e.target.starts_with(&r.target_prefix))
    };
    let skip = match after {
        None => matching().count().saturating_sub(limit),
        Some(_) => 0,
    };
    matching()
        .skip(skip)
        .take(AUDIT_BATCH_MAX)
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
        .collect()
}
