//! Carrying out one key's planned step: what is recorded before the call upstream, the
//! call itself (sent with every other key's in one batch, see [`super::round`]), and the
//! replicated command that records what came back.
//!
//! Order matters for P1. Credit enters the ledger only after the upstream granted it, with
//! a deadline measured from before the request was sent. Idle credit leaves the ledger
//! (`UpstreamReturn`) before the report that gives it back is sent, so it cannot be
//! sub-leased while the upstream already counts it as returned. A lease is released only
//! once no sub-lease of it is out and nothing is left to sub-lease, so the final usage it
//! states can no longer grow.

use super::plan::{KeyView, Step};
use super::{UpstreamConfig, UpstreamCounters};
use crate::replica::{Replica, ReplicaError};
use crate::service::call_counts::CallKind;
use crate::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_client::wire::lease_from_pb;
use leasehold_client::GrantorError;
use leasehold_common::lease::LeaseVerifier;
use leasehold_common::ledger::{Command, Outcome, UpstreamLease};
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use pb::lease_batch_item::Call;
use pb::lease_batch_outcome::Outcome as Answer;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// A step that could not finish: try the key again after `ms`.
#[derive(Debug)]
pub struct Pause {
    pub ms: u64,
    pub why: String,
}

/// The kind of `call`, all its answer is read by.
pub fn kind(call: &Call) -> CallKind {
    match call {
        Call::Acquire(_) => CallKind::Acquire,
        Call::Report(_) => CallKind::Report,
        Call::Release(_) => CallKind::Release,
    }
}

fn pause(ms: u64, why: impl ToString) -> Pause {
    Pause {
        ms,
        why: why.to_string(),
    }
}

pub struct Exchange<R> {
    replica: R,
    verifier: Option<LeaseVerifier>,
    cfg: UpstreamConfig,
    counters: Arc<UpstreamCounters>,
    last_request_id: AtomicU64,
    leading: AtomicBool,
}

impl<R: Replica<AllocatorState>> Exchange<R> {
    pub fn new(
        replica: R,
        verifier: Option<LeaseVerifier>,
        cfg: UpstreamConfig,
        counters: Arc<UpstreamCounters>,
    ) -> Self {
        Exchange {
            replica,
            verifier,
            cfg,
            counters,
            last_request_id: AtomicU64::new(0),
            leading: AtomicBool::new(true),
        }
    }

    pub fn replica(&self) -> &R {
        &self.replica
    }

    /// False once a proposal was refused for lack of leadership since the last look.
    pub fn still_leading(&self) -> bool {
        self.leading.swap(true, Relaxed)
    }

    /// Request ids must grow across every leader of this cluster: the replicated timeline
    /// does, and it is far coarser than the ids one round uses.
    fn request_id(&self, now: Nanos) -> u64 {
        let next = |last: u64| (last + 1).max(now.0);
        let last = self
            .last_request_id
            .fetch_update(Relaxed, Relaxed, |last| Some(next(last)))
            .unwrap_or_else(|last| last);
        next(last)
    }

    /// Everything a step records before its call, and the call; None when the step needs
    /// no call (an expired lease closed, a released key found already closed).
    pub async fn prepare(
        &self,
        v: &KeyView,
        step: &Step,
        now: Nanos,
    ) -> Result<Option<Call>, Pause> {
        match *step {
            Step::Wait => Ok(None),
            Step::Acquire => Ok(Some(Call::Acquire(self.acquire_request(v, now)))),
            Step::Report {
                give_back,
                want_more,
            } => {
                let req = self.report_request(v, now, give_back, want_more).await?;
                Ok(Some(Call::Report(req)))
            }
            Step::Expired => {
                self.counters.expired.fetch_add(1, Relaxed);
                self.close(v, false).await.map(|()| None)
            }
            Step::Release => Ok(self.release_request(v, now).await?.map(Call::Release)),
        }
    }

    /// Records what the upstream answered to the key's call of kind `call`.
    pub async fn finish(
        &self,
        v: &KeyView,
        call: CallKind,
        answer: Result<Answer, GrantorError>,
        sent_at: Nanos,
    ) -> Result<(), Pause> {
        use CallKind::{Acquire, Release, Report};
        match (call, answer) {
            (Acquire, Ok(Answer::Acquired(resp))) => self.acquired(v, resp, sent_at).await,
            (Report, Ok(Answer::Reported(resp))) => self.reported(v, resp, sent_at).await,
            (Report, Err(GrantorError::Refused { code, message })) => {
                // The upstream no longer knows the lease: it ran out or was revoked there.
                tracing::info!(key = %v.key, ?code, message, "upstream lease gone");
                self.close(v, false).await
            }
            (Release, Ok(Answer::Released(_))) => self.released(v, true).await,
            (Release, Err(GrantorError::Refused { .. })) => self.released(v, false).await,
            (_, Err(e)) => Err(self.failed(e)),
            (_, Ok(other)) => Err(pause(0, format!("upstream answered with {other:?}"))),
        }
    }

    fn acquire_request(&self, v: &KeyView, now: Nanos) -> pb::AcquireRequest {
        pb::AcquireRequest {
            holder_id: self.cfg.holder_id.clone(),
            policy_id: v.policy_id.clone(),
            key: v.key.clone(),
            want_credit: v.want,
            demand_milli_units_per_sec: v.demand_milli_per_sec,
            request_id: self.request_id(now),
            priority: v.priority,
            known_policy_version: 0,
            ..Default::default()
        }
    }

    async fn acquired(
        &self,
        v: &KeyView,
        resp: pb::AcquireResponse,
        now: Nanos,
    ) -> Result<(), Pause> {
        let Some(lease) = resp.lease else {
            self.counters.denied.fetch_add(1, Relaxed);
            return Err(pause(resp.retry_after_ms, "upstream denied credit"));
        };
        self.counters.acquired.fetch_add(1, Relaxed);
        self.publish(v, &lease, now).await
    }

    async fn report_request(
        &self,
        v: &KeyView,
        now: Nanos,
        give_back: u64,
        want_more: u64,
    ) -> Result<pb::ReportRequest, Pause> {
        let pos = v.position.expect("planned on a lease");
        let mut returned = pos.returned;
        if give_back > 0 {
            let cmd = Command::UpstreamReturn {
                key: v.key.clone(),
                units: give_back,
            };
            // Refused when sub-leases took the idle credit meanwhile: report without it.
            if self.propose(cmd).await?.is_ok() {
                returned += give_back;
                self.counters.returned_units.fetch_add(give_back, Relaxed);
            }
        }
        Ok(pb::ReportRequest {
            holder_id: self.cfg.holder_id.clone(),
            lease_id: pos.upstream_lease_id,
            used: pos.used,
            return_credit: returned,
            want_credit: want_more,
            demand_milli_units_per_sec: v.demand_milli_per_sec,
            request_id: self.request_id(now),
            policy_version: 0,
            shadow_would_deny: 0,
            ..Default::default()
        })
    }

    async fn reported(
        &self,
        v: &KeyView,
        resp: pb::ReportResponse,
        now: Nanos,
    ) -> Result<(), Pause> {
        let pos = v.position.expect("planned on a lease");
        self.counters.reports.fetch_add(1, Relaxed);
        let lease = resp.lease.unwrap_or_default();
        if lease.lease_id == pos.upstream_lease_id && lease.generation > pos.generation {
            return self.publish(v, &lease, now).await;
        }
        // Not renewed (revoked, superseded or policy changed upstream): stop sub-leasing it
        // and take the replacement, or acquire afresh next round. Sub-leases already out
        // keep their own, earlier deadlines.
        self.close(v, false).await?;
        match resp.replacement {
            Some(next) => self.publish(v, &next, now).await,
            None => Ok(()),
        }
    }

    /// Gives the key's idle credit back and, once nothing of the lease is out or left to
    /// sub-lease, the release that states its final usage.
    async fn release_request(
        &self,
        v: &KeyView,
        now: Nanos,
    ) -> Result<Option<pb::ReleaseRequest>, Pause> {
        let pos = v.position.expect("planned on a lease");
        if pos.idle > 0 {
            let cmd = Command::UpstreamReturn {
                key: v.key.clone(),
                units: pos.idle,
            };
            let _ = self.propose(cmd).await?;
        }
        let key = v.key.clone();
        let fresh = self
            .replica
            .read(move |s| s.ledger().upstream_position(&key))
            .await
            .map_err(|e| self.replica_failed(e))?;
        let Some(pos) = fresh.filter(|p| p.upstream_lease_id == pos.upstream_lease_id) else {
            return Ok(None);
        };
        let (Some(final_used), 0) = (pos.final_used(), pos.idle) else {
            return Err(pause(0, "sub-leases still out"));
        };
        Ok(Some(pb::ReleaseRequest {
            holder_id: self.cfg.holder_id.clone(),
            lease_id: pos.upstream_lease_id,
            final_used,
            request_id: self.request_id(now),
            ..Default::default()
        }))
    }

    async fn released(&self, v: &KeyView, released: bool) -> Result<(), Pause> {
        self.counters.released.fetch_add(1, Relaxed);
        self.close(v, released).await
    }

    async fn close(&self, v: &KeyView, released: bool) -> Result<(), Pause> {
        let cmd = Command::UpstreamClosed {
            key: v.key.clone(),
            released,
        };
        self.propose(cmd).await.map(|_| ())
    }

    /// Records a granted or renewed upstream lease version sent for at `sent_at`.
    async fn publish(&self, v: &KeyView, lease: &pb::Lease, sent_at: Nanos) -> Result<(), Pause> {
        let l = lease_from_pb(lease);
        if l.policy_id != v.policy_id || l.key != v.key || l.holder_id != self.cfg.holder_id {
            return Err(pause(
                0,
                format!("upstream lease {} is for another key or holder", l.lease_id),
            ));
        }
        if let Some(verifier) = &self.verifier {
            verifier
                .verify(&l)
                .map_err(|e| pause(0, format!("upstream lease {}: {e}", l.lease_id)))?;
        }
        let cmd = Command::UpstreamGranted(UpstreamLease {
            policy_id: l.policy_id.clone(),
            key: l.key.clone(),
            upstream_lease_id: l.lease_id,
            credit: l.credit,
            deadline: self.cfg.holder.deadline(sent_at, l.ttl_ms),
            generation: l.generation,
        });
        match self.propose(cmd).await? {
            Ok(_) => Ok(()),
            Err(e) => Err(pause(0, e)),
        }
    }

    /// Proposes a ledger command; the outer error pauses the key (no leader, no quorum),
    /// the inner one is the ledger's refusal.
    async fn propose(&self, cmd: Command) -> Result<Result<Outcome, String>, Pause> {
        match self.replica.propose(StateCommand::Ledger(cmd)).await {
            Ok(StateOutput::Ledger(r)) => Ok(r.map_err(|e| e.to_string())),
            Ok(other) => Ok(Err(format!("unexpected output {other:?}"))),
            Err(e) => Err(self.replica_failed(e)),
        }
    }

    fn replica_failed(&self, e: ReplicaError) -> Pause {
        if matches!(e, ReplicaError::NotLeader { .. }) {
            self.leading.store(false, Relaxed);
        }
        pause(0, e)
    }

    fn failed(&self, e: GrantorError) -> Pause {
        self.counters.unreachable.fetch_add(1, Relaxed);
        pause(0, e)
    }
}
