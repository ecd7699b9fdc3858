//! Watch streams: policy changes, emergency switches and revocations pushed to holders.
//!
//! Events live in the replicated state (a bounded ring with sequence numbers), so a holder
//! that reconnects to any node with `after_seq` misses nothing that is still kept. Each
//! stream polls the node's state; the channel to the client is bounded, and a stream whose
//! client stopped reading ends.

use super::convert::emergency_to_pb;
use crate::replica::Replica;
use crate::state::{AllocatorState, Event, EventKind};
use leasehold_proto::leasehold::v1 as pb;
use std::time::{Duration, Instant};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

#[derive(Clone, Debug)]
pub struct WatchSettings {
    pub poll_ms: u64,
    pub heartbeat_ms: u64,
    pub buffer_max: usize,
    pub batch_max: usize,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            poll_ms: 200,
            heartbeat_ms: 5_000,
            buffer_max: 64,
            batch_max: 256,
        }
    }
}

pub fn policy_info(
    state: &AllocatorState,
    policy_id: &str,
    version: u64,
) -> Option<pb::PolicyInfo> {
    let v = state.policies().get_version(policy_id, version).ok()?;
    let yaml = v.policy.to_yaml().ok()?;
    let meta = state.meta(policy_id).cloned().unwrap_or_default();
    Some(pb::PolicyInfo {
        policy_id: policy_id.to_string(),
        version,
        yaml_sha256: ring::digest::digest(&ring::digest::SHA256, yaml.as_bytes())
            .as_ref()
            .to_vec(),
        yaml,
        effective_at_ms: meta.effective_at_ns / 1_000_000,
        shadow: v.policy.mode == leasehold_common::policy::Mode::Shadow,
        kill_switch: v.policy.kill_switch,
    })
}

/// The events of interest to `holder_id` after `after_seq`, as wire events.
fn pending(
    state: &AllocatorState,
    req: &pb::WatchRequest,
    after_seq: u64,
    max: usize,
) -> Vec<pb::WatchEvent> {
    let wanted = |policy_id: &str| {
        req.policy_ids.is_empty() || req.policy_ids.iter().any(|p| p == policy_id)
    };
    let mut out = Vec::new();
    for Event { seq, kind } in state.events_after(after_seq) {
        let event = match kind {
            EventKind::PolicyChanged { policy_id, version } if wanted(policy_id) => {
                policy_info(state, policy_id, *version).map(|policy| {
                    pb::watch_event::Event::PolicyChanged(pb::PolicyChanged {
                        policy: Some(policy),
                        deleted: false,
                    })
                })
            }
            EventKind::Emergency(e) if wanted(&e.policy_id) => {
                Some(pb::watch_event::Event::Emergency(emergency_to_pb(e)))
            }
            EventKind::LeaseRevoked {
                lease_id,
                holder_id,
                reason,
            } if *holder_id == req.holder_id => {
                Some(pb::watch_event::Event::Revoked(pb::LeaseRevoked {
                    lease_id: *lease_id,
                    policy_id: String::new(),
                    key: String::new(),
                    reason: reason.clone(),
                }))
            }
            _ => None,
        };
        // Skipped events still advance the cursor: the holder has seen everything up to here.
        out.push(pb::WatchEvent { seq: *seq, event });
        if out.len() >= max {
            break;
        }
    }
    out
}

pub fn watch_stream<R: Replica<AllocatorState>>(
    replica: R,
    req: pb::WatchRequest,
    settings: WatchSettings,
) -> ReceiverStream<Result<pb::WatchEvent, Status>> {
    let (tx, rx) = tokio::sync::mpsc::channel(settings.buffer_max.max(1));
    tokio::spawn(async move {
        let mut after = req.after_seq;
        let mut last_sent = Instant::now();
        loop {
            let (r, batch) = (req.clone(), settings.batch_max);
            let events = match replica.read(move |s| pending(s, &r, after, batch)).await {
                Ok(events) => events,
                Err(e) => {
                    let _ = tx.send(Err(super::convert::replica_status(e))).await;
                    return;
                }
            };
            for ev in events {
                after = ev.seq;
                if ev.event.is_some() {
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                    last_sent = Instant::now();
                }
            }
            if last_sent.elapsed() >= Duration::from_millis(settings.heartbeat_ms) {
                let hb = pb::WatchEvent {
                    seq: after,
                    event: Some(pb::watch_event::Event::Heartbeat(pb::Heartbeat {
                        interval_ms: settings.heartbeat_ms,
                    })),
                };
                if tx.send(Ok(hb)).await.is_err() {
                    return;
                }
                last_sent = Instant::now();
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(settings.poll_ms.max(1))).await;
        }
    });
    ReceiverStream::new(rx)
}
