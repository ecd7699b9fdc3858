//! Following the grantor's watch stream: revocations, policy changes, emergency switches.

use super::manager::{LeaseManager, NS_PER_MS};
use crate::credit::SlotState;
use crate::engine::Emergency;
use leasehold_client::{GrantorError, WatchStream};
use leasehold_common::policy::{Policy, PolicyVersion};
use leasehold_common::rate::Rate;
use leasehold_common::time::{Clock, Nanos, WallClock};
use leasehold_proto::leasehold::v1 as pb;
use pb::watch_event::Event;
use std::collections::BTreeMap;
use tokio_stream::StreamExt;

/// Nanoseconds in 1000 seconds: a rate in milli-units per second is units per 1000 s.
const NS_PER_KILOSECOND: u64 = 1_000 * 1_000_000_000;

/// The watch stream and where to resume it.
#[derive(Default)]
pub(super) struct Watching {
    stream: Option<WatchStream>,
    /// Sequence number of the last event seen; a reopened stream resumes after it.
    after_seq: u64,
    /// No stream before this time (after a failure).
    retry_at: Nanos,
    /// A stream silent past this time is dead.
    silent_at: Nanos,
    /// Twice the last heartbeat interval heard, in ns; zero before any.
    silence_ns: u64,
    /// The last switch per policy id ("" = all), applied again when a policy arrives.
    emergencies: BTreeMap<String, Emergency>,
}

impl Watching {
    /// The next item of the stream; pending forever without one.
    pub(super) async fn next(&mut self) -> Option<Result<pb::WatchEvent, GrantorError>> {
        match &mut self.stream {
            Some(s) => s.next().await,
            None => std::future::pending().await,
        }
    }

    fn lost(&mut self, now: Nanos, retry_ms: u64) {
        self.stream = None;
        self.retry_at = now.saturating_add_ns(retry_ms * NS_PER_MS);
    }

    fn heard(&mut self, now: Nanos, silence_max_ns: u64) {
        let silence = if self.silence_ns == 0 {
            silence_max_ns
        } else {
            self.silence_ns
        };
        self.silent_at = now.saturating_add_ns(silence);
    }
}

/// An allocator's switch as the engine applies it; None if it names no usable mode.
fn emergency_of(e: &pb::EmergencySwitch) -> Option<Emergency> {
    match pb::EmergencyMode::try_from(e.mode).ok()? {
        pb::EmergencyMode::Normal => Some(Emergency::Normal),
        pb::EmergencyMode::FailOpen => Some(Emergency::FailOpen),
        pb::EmergencyMode::Restricted => Some(Emergency::Restricted {
            min_priority: u8::try_from(e.min_priority).unwrap_or(u8::MAX),
            rate: Rate::new(e.restricted_rate_milli_per_sec, NS_PER_KILOSECOND).ok()?,
        }),
        pb::EmergencyMode::Unspecified => None,
    }
}

impl LeaseManager {
    /// Opens the stream when there is none and its retry time has come; drops a stream
    /// that went silent for longer than its heartbeats promise.
    pub(super) async fn keep_watching(&mut self, w: &mut Watching) {
        if !self.grantor.pushes_changes() {
            return;
        }
        let now = self.clock.now();
        if w.stream.is_some() {
            if now >= w.silent_at {
                tracing::warn!(after_seq = w.after_seq, "watch stream silent; reopening");
                w.stream = None;
            } else {
                return;
            }
        }
        if now < w.retry_at {
            return;
        }
        let req = pb::WatchRequest {
            holder_id: self.cfg.holder_id.clone(),
            policy_ids: Vec::new(),
            after_seq: w.after_seq,
        };
        match self.grantor.watch(req).await {
            Ok(stream) => {
                self.counters.watch_connects += 1;
                w.stream = Some(stream);
                w.heard(now, self.cfg.watch_silence_max_ms * NS_PER_MS);
            }
            Err(e) => {
                tracing::debug!(error = %e, "watch stream not opened; retrying later");
                w.lost(now, self.cfg.watch_retry_ms);
            }
        }
    }

    pub(super) async fn on_watch_item(
        &mut self,
        w: &mut Watching,
        item: Option<Result<pb::WatchEvent, GrantorError>>,
    ) {
        let now = self.clock.now();
        let ev = match item {
            Some(Ok(ev)) => ev,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "watch stream broke; reopening later");
                return w.lost(now, self.cfg.watch_retry_ms);
            }
            None => return w.lost(now, self.cfg.watch_retry_ms),
        };
        w.after_seq = w.after_seq.max(ev.seq);
        if let Some(engine) = &self.engine {
            // Whatever the stream delivers, it is the grantor's state up to now.
            engine.policies_confirmed(WallClock.now().0 / 1_000_000);
        }
        match ev.event {
            Some(Event::Heartbeat(hb)) => {
                w.silence_ns = hb.interval_ms.saturating_mul(2 * NS_PER_MS);
                // The grantor's current state ends with a heartbeat.
                self.synced
                    .store(true, std::sync::atomic::Ordering::Release);
            }
            Some(Event::Revoked(r)) => self.revoke(r).await,
            Some(Event::PolicyChanged(c)) => self.policy_changed(c, &w.emergencies),
            Some(Event::Emergency(e)) => {
                if let Some(mode) = emergency_of(&e) {
                    w.emergencies.insert(e.policy_id.clone(), mode);
                    self.apply_emergency(&e.policy_id, mode);
                }
            }
            None => {}
        }
        w.heard(now, self.cfg.watch_silence_max_ms * NS_PER_MS);
    }

    /// Stops spending a revoked lease at once and settles it with its exact usage.
    async fn revoke(&mut self, r: pb::LeaseRevoked) {
        let Some(k) = self
            .held
            .iter()
            .find(|(_, h)| h.lease_id == r.lease_id)
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        let h = self.held.remove(&k).expect("present");
        // Close first: the release below waits on the network.
        h.slot.close();
        h.slot.set_state(SlotState::Idle);
        self.counters.revocations += 1;
        tracing::warn!(lease_id = r.lease_id, reason = %r.reason, "lease revoked");
        if self.reserve_request_ids(1).await {
            self.release(h).await;
        } else {
            self.forget.push(h.lease_id);
        }
    }

    fn policy_changed(&mut self, c: pb::PolicyChanged, emergencies: &BTreeMap<String, Emergency>) {
        let (Some(engine), Some(info)) = (&self.engine, c.policy) else {
            return;
        };
        let id = info.policy_id.clone();
        let result = if c.deleted {
            engine.remove_policy(&id)
        } else {
            match Policy::from_yaml(&info.yaml) {
                Ok(policy) if policy.id == id => engine.install_policy(PolicyVersion {
                    version: info.version,
                    policy,
                    rolled_back_from: None,
                }),
                Ok(policy) => {
                    let got = policy.id;
                    return tracing::error!(policy = %id, %got, "watched policy YAML names another id; ignored");
                }
                Err(e) => {
                    return tracing::error!(policy = %id, version = info.version, error = %e, "watched policy YAML invalid; ignored");
                }
            }
        };
        match result {
            Ok(true) => {
                self.counters.policies_installed += 1;
                tracing::info!(policy = %id, version = info.version, deleted = c.deleted, "policy from the allocator");
                for key in ["", id.as_str()] {
                    if let Some(&mode) = emergencies.get(key) {
                        self.apply_emergency(&id, mode);
                    }
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(policy = %id, error = %e, "policy from the allocator not installed")
            }
        }
    }

    fn apply_emergency(&self, policy_id: &str, mode: Emergency) {
        let Some(engine) = &self.engine else { return };
        let ids = if policy_id.is_empty() {
            engine.policy_ids()
        } else {
            vec![policy_id.to_owned()]
        };
        for id in ids {
            // A policy not installed yet gets the switch when it arrives.
            if let Err(e) = engine.set_emergency(&id, mode) {
                tracing::debug!(policy = %id, error = %e, "emergency switch not applied yet");
            }
        }
    }
}
