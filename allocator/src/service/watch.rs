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
use std::time::Duration;
// tokio's clock, not std's: the same on a real runtime, and it follows a paused or
// simulated one, so heartbeats keep the simulation's time.
use tokio::time::Instant;
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
    first: bool,
    heartbeat_ms: u64,
) -> Vec<pb::WatchEvent> {
    let wanted = |policy_id: &str| {
        req.policy_ids.is_empty() || req.policy_ids.iter().any(|p| p == policy_id)
    };
    // `after_seq` stays 0 while no event exists at all: only the first read starts fresh.
    // The current state stands for every event up to now, so none of them follows it.
    if state.needs_catch_up(after_seq) && (first || after_seq > 0) {
        return current_state(state, req, heartbeat_ms);
    }
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

/// The current state of every watched policy and switch, as events at the newest sequence
/// number: what a fresh or too-far-behind holder sees before the events that follow.
fn current_state(
    state: &AllocatorState,
    req: &pb::WatchRequest,
    heartbeat_ms: u64,
) -> Vec<pb::WatchEvent> {
    let seq = state.next_event_seq() - 1;
    let wanted = |policy_id: &str| {
        req.policy_ids.is_empty() || req.policy_ids.iter().any(|p| p == policy_id)
    };
    let policies = state
        .policies()
        .current()
        .map(|v| v.policy.id.as_str())
        .filter(|id| wanted(id))
        .filter_map(|id| policy_info(state, id, state.effective_version(id)?))
        .map(|policy| {
            pb::watch_event::Event::PolicyChanged(pb::PolicyChanged {
                policy: Some(policy),
                deleted: false,
            })
        });
    let switches = state
        .emergencies()
        .filter(|e| wanted(&e.policy_id))
        .map(|e| pb::watch_event::Event::Emergency(emergency_to_pb(e)));
    // A heartbeat ends the current state (so the holder knows it has all of it, even when
    // it is empty) and moves the holder's cursor to `seq`.
    let end = pb::watch_event::Event::Heartbeat(pb::Heartbeat {
        interval_ms: heartbeat_ms,
    });
    policies
        .chain(switches)
        .chain(std::iter::once(end))
        .map(|event| pb::WatchEvent {
            seq,
            event: Some(event),
        })
        .collect()
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
        let mut first = true;
        loop {
            let (r, batch, hb) = (req.clone(), settings.batch_max, settings.heartbeat_ms);
            let read = replica.read(move |s| pending(s, &r, after, batch, first, hb));
            first = false;
            let events = match read.await {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::Machine;
    use crate::state::StateCommand;
    use leasehold_common::ledger::LedgerConfig;
    use leasehold_common::time::Nanos;

    fn policy(rate: u64) -> String {
        format!("id: api\nkey: [tenant]\ndimensions: [{{name: tenant}}]\nrate: {{units: {rate}, per: 1s}}\nburst: 100\n")
    }

    fn apply(state: &mut AllocatorState, rate: u64) {
        let cmd = StateCommand::ApplyPolicy {
            yaml: policy(rate),
            shadow: false,
            effective_at_ns: 0,
            actor: "admin".into(),
        };
        assert!(matches!(
            state.apply(Nanos(1), cmd),
            crate::state::StateOutput::Policy { changed: true, .. }
        ));
    }

    fn req() -> pb::WatchRequest {
        pb::WatchRequest {
            holder_id: "gw".into(),
            ..Default::default()
        }
    }

    fn versions(events: &[pb::WatchEvent]) -> Vec<u64> {
        events
            .iter()
            .filter_map(|e| match &e.event {
                Some(pb::watch_event::Event::PolicyChanged(p)) => {
                    p.policy.as_ref().map(|p| p.version)
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_holder_too_far_behind_gets_the_current_state_first() {
        let mut state = AllocatorState::new(LedgerConfig::root("g"));
        apply(&mut state, 1);
        let fresh = pending(&state, &req(), 0, 1_000, true, 1_000);
        assert_eq!(
            versions(&fresh),
            vec![1],
            "the current state stands for the event"
        );
        // More changes than events are kept: resuming from seq 1 has lost events.
        for rate in 2..(crate::state::WATCH_EVENTS_MAX as u64 + 10) {
            apply(&mut state, rate);
        }
        let newest = state.policies().get("api").unwrap().version;
        let behind = pending(&state, &req(), 1, 1, false, 1_000);
        assert_eq!(versions(&behind), vec![newest], "{behind:?}");
        let cursor = behind.last().unwrap().seq;
        assert_eq!(
            cursor,
            state.next_event_seq() - 1,
            "cursor moves to the newest"
        );
        let current = pending(&state, &req(), state.next_event_seq() - 1, 10, false, 1_000);
        assert!(current.is_empty(), "up to date: nothing to send");
    }

    #[test]
    fn no_events_at_all_means_one_catch_up_only() {
        let state = AllocatorState::new(LedgerConfig::root("g"));
        let first = pending(&state, &req(), 0, 10, true, 1_000);
        assert_eq!(first.len(), 1, "{first:?}");
        assert!(matches!(
            first[0].event,
            Some(pb::watch_event::Event::Heartbeat(_))
        ));
        assert!(pending(&state, &req(), 0, 10, false, 1_000).is_empty());
    }
}
