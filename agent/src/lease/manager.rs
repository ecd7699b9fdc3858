//! The holder side of the lease protocol: keeps each key's credit slot supplied.
//!
//! One task owns every lease of this holder. For each key it knows what it deposited into
//! the slot and what it withdrew, so the exact spend is `deposited − withdrawn − remaining`
//! at any instant, without locks on the hot path. It acquires a lease the first time a key
//! sees traffic, reports cumulative usage and renews before the credit or the lease runs out
//! (sized from measured demand), hands back credit well beyond its demand, releases keys that
//! went idle, and releases everything with its exact final usage on shutdown.
//!
//! Not built yet: a durable high-water mark (a restarted agent starts with nothing and its old
//! leases are written off as stranded), the watch stream (policy changes and revocations
//! arrive at the next renewal), and signature checks of received leases.

use super::grantor::{Grantor, GrantorError};
use crate::credit::{CreditSlot, SlotState};
use crate::engine::{AcquireReceiver, AcquireRequest};
use leasehold_common::lease::HolderConfig;
use leasehold_common::time::{Clock, Nanos, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const NS_PER_MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct ManagerConfig {
    pub holder_id: String,
    pub holder: HolderConfig,
    /// How often the manager looks at its slots.
    pub tick_ms: u64,
    /// Longest time between usage reports of a lease.
    pub report_every_ms: u64,
    /// Credit asked for on a key's first lease, before any demand is measured.
    pub initial_want: u64,
    /// Keys without traffic for this long give their lease back.
    pub idle_release_ms: u64,
    /// Wait before asking again after a denial or an unreachable grantor.
    pub retry_ms: u64,
    pub leases_max: usize,
}

impl ManagerConfig {
    pub fn new(holder_id: impl Into<String>) -> Self {
        ManagerConfig {
            holder_id: holder_id.into(),
            holder: HolderConfig::default(),
            tick_ms: 20,
            report_every_ms: 500,
            initial_want: 100,
            idle_release_ms: 30_000,
            retry_ms: 250,
            leases_max: 100_000,
        }
    }
}

/// What the manager did, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerCounters {
    pub acquires: u64,
    pub denials: u64,
    pub reports: u64,
    pub releases: u64,
    pub unreachable: u64,
    /// Units released back unspent.
    pub reclaimed: u64,
}

struct Held {
    policy_id: Arc<str>,
    key: Box<str>,
    slot: Arc<CreditSlot>,
    lease_id: u64,
    generation: u64,
    deposited: u64,
    withdrawn: u64,
    reported_used: u64,
    last_report: Nanos,
    offered_at_report: u64,
    deadline: Nanos,
    priority: u8,
}

impl Held {
    fn spent(&self) -> u64 {
        (self.deposited - self.withdrawn)
            .saturating_sub(self.slot.remaining())
            .max(self.reported_used)
    }
}

pub struct LeaseManager {
    cfg: ManagerConfig,
    grantor: Arc<dyn Grantor>,
    clock: SystemClock,
    queue: AcquireReceiver,
    held: BTreeMap<(Arc<str>, Box<str>), Held>,
    waiting: Vec<(AcquireRequest, Nanos)>,
    next_request: u64,
    pub counters: ManagerCounters,
}

impl LeaseManager {
    /// `clock` must be the clock the engine decides with: deadlines are on its timeline.
    pub fn new(
        cfg: ManagerConfig,
        grantor: Arc<dyn Grantor>,
        clock: SystemClock,
        queue: AcquireReceiver,
    ) -> Self {
        LeaseManager {
            cfg,
            grantor,
            clock,
            queue,
            held: BTreeMap::new(),
            waiting: Vec::new(),
            next_request: 0,
            counters: ManagerCounters::default(),
        }
    }

    /// Runs until `shutdown` flips to true, then releases every lease.
    pub async fn run(
        mut self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> ManagerCounters {
        let tick = Duration::from_millis(self.cfg.tick_ms.max(1));
        while !*shutdown.borrow() {
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                _ = tokio::time::sleep(tick) => self.step().await,
            }
        }
        self.release_all().await;
        self.counters
    }

    fn request_id(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }

    /// One round: new keys, retries, renewals, idle releases.
    pub async fn step(&mut self) {
        let now = self.clock.now();
        while let Ok(req) = self.queue.try_recv() {
            self.waiting.push((req, now));
        }
        let due: Vec<(AcquireRequest, Nanos)> = std::mem::take(&mut self.waiting);
        for (req, at) in due {
            if at > now {
                self.waiting.push((req, at));
            } else if self.held.len() < self.cfg.leases_max {
                self.acquire(req).await;
            }
        }
        let keys: Vec<(Arc<str>, Box<str>)> = self.held.keys().cloned().collect();
        for k in keys {
            self.maintain(k, now).await;
        }
    }

    async fn acquire(&mut self, req: AcquireRequest) {
        let sent_at = self.clock.now();
        let r = pb::AcquireRequest {
            holder_id: self.cfg.holder_id.clone(),
            policy_id: req.policy_id.to_string(),
            key: req.key.to_string(),
            want_credit: self.cfg.initial_want,
            demand_milli_units_per_sec: 0,
            request_id: self.request_id(),
            priority: u32::from(req.priority),
            known_policy_version: req.policy_version,
        };
        self.counters.acquires += 1;
        let retry_at = sent_at.saturating_add_ns(self.cfg.retry_ms * NS_PER_MS);
        match self.grantor.acquire(r).await {
            Ok(pb::AcquireResponse {
                lease: Some(lease), ..
            }) => self.start(req, lease, sent_at),
            Ok(denied) => {
                tracing::debug!(policy = %req.policy_id, key = %req.key, reason = denied.deny_reason, "lease denied for now");
                self.counters.denials += 1;
                req.slot.set_state(SlotState::Denied);
                let wait = denied.retry_after_ms.max(self.cfg.retry_ms) * NS_PER_MS;
                self.waiting.push((req, sent_at.saturating_add_ns(wait)));
            }
            Err(GrantorError::Unreachable(why)) => {
                tracing::warn!(policy = %req.policy_id, key = %req.key, %why, "grantor unreachable");
                self.counters.unreachable += 1;
                req.slot.set_state(SlotState::Unreachable);
                self.waiting.push((req, retry_at));
            }
            Err(GrantorError::Refused { code, message }) => {
                tracing::warn!(policy = %req.policy_id, key = %req.key, ?code, %message, "lease refused");
                self.counters.denials += 1;
                req.slot.set_state(SlotState::Denied);
                self.waiting.push((req, retry_at));
            }
        }
    }

    fn start(&mut self, req: AcquireRequest, lease: pb::Lease, sent_at: Nanos) {
        let deadline = self.cfg.holder.deadline(sent_at, lease.ttl_ms);
        req.slot.deposit(lease.credit, deadline.0);
        req.slot.set_state(SlotState::Active);
        let held = Held {
            policy_id: Arc::clone(&req.policy_id),
            key: req.key.clone(),
            offered_at_report: req.slot.offered(),
            slot: req.slot,
            lease_id: lease.lease_id,
            generation: lease.generation,
            deposited: lease.credit,
            withdrawn: 0,
            reported_used: 0,
            last_report: sent_at,
            deadline,
            priority: req.priority,
        };
        self.held
            .insert((held.policy_id.clone(), held.key.clone()), held);
    }

    /// Demand in units per second since the last report, and the credit wanted for the
    /// refresh horizon at that demand.
    fn demand(&self, h: &Held, now: Nanos) -> (u64, u64) {
        let elapsed_ns = now.saturating_since(h.last_report).max(1);
        let offered = h.slot.offered().saturating_sub(h.offered_at_report);
        let per_sec = u64::try_from(u128::from(offered) * 1_000_000_000 / u128::from(elapsed_ns))
            .unwrap_or(u64::MAX);
        let horizon = per_sec.saturating_mul(self.cfg.holder.refresh_horizon_ms) / 1_000;
        (per_sec, horizon.max(1))
    }

    async fn maintain(&mut self, k: (Arc<str>, Box<str>), now: Nanos) {
        let Some(h) = self.held.get(&k) else { return };
        if now >= h.deadline {
            // Expired before a renewal got through: stop; the grantor writes it off.
            let h = self.held.remove(&k).expect("present");
            h.slot.close();
            h.slot.set_state(SlotState::Idle);
            return;
        }
        let idle_ns = self.cfg.idle_release_ms * NS_PER_MS;
        if now.0.saturating_sub(h.slot.last_offered_ns()) >= idle_ns
            && now.saturating_since(h.last_report) >= idle_ns
        {
            let h = self.held.remove(&k).expect("present");
            self.release(h).await;
            return;
        }
        let (_, horizon) = self.demand(h, now);
        let report_due =
            now.saturating_since(h.last_report) >= self.cfg.report_every_ms * NS_PER_MS;
        let running_low = 2 * h.slot.remaining() < horizon;
        let expiring = h.deadline.saturating_since(now) < self.cfg.holder.refresh_horizon_ns();
        if report_due || running_low || expiring {
            self.report(k, now).await;
        }
    }

    async fn report(&mut self, k: (Arc<str>, Box<str>), now: Nanos) {
        let request_id = self.request_id();
        let (per_sec, horizon) = {
            let h = &self.held[&k];
            self.demand(h, now)
        };
        let h = self.held.get_mut(&k).expect("present");
        // Credit far beyond demand goes back, so idle credit flows to where demand is.
        let surplus = h.slot.remaining().saturating_sub(4 * horizon);
        if surplus > 0 {
            h.withdrawn += h.slot.withdraw(surplus);
        }
        let used = h.spent();
        let want = (2 * horizon).saturating_sub(h.slot.remaining());
        let r = pb::ReportRequest {
            holder_id: self.cfg.holder_id.clone(),
            lease_id: h.lease_id,
            used,
            return_credit: h.withdrawn,
            want_credit: want,
            demand_milli_units_per_sec: per_sec.saturating_mul(1_000),
            request_id,
            policy_version: 0,
        };
        self.counters.reports += 1;
        let sent_at = now;
        match self.grantor.report(r).await {
            Ok(resp) => {
                let h = self.held.get_mut(&k).expect("present");
                h.reported_used = used;
                h.last_report = sent_at;
                h.offered_at_report = h.slot.offered();
                if let Some(lease) = resp.lease {
                    let held_credit = h.deposited - h.withdrawn;
                    let added = lease.credit.saturating_sub(held_credit);
                    if lease.generation > h.generation {
                        h.generation = lease.generation;
                        h.deadline = self.cfg.holder.deadline(sent_at, lease.ttl_ms);
                    }
                    h.deposited += added;
                    h.slot.deposit(added, h.deadline.0);
                }
                if let Some(new) = resp.replacement {
                    let old = self.held.remove(&k).expect("present");
                    let req = AcquireRequest {
                        policy_id: old.policy_id.clone(),
                        policy_version: new.policy_version,
                        key: old.key.clone(),
                        slot: Arc::clone(&old.slot),
                        priority: old.priority,
                    };
                    self.release(old).await;
                    self.start(req, new, sent_at);
                }
            }
            Err(GrantorError::Unreachable(_)) => {
                self.counters.unreachable += 1;
                self.held[&k].slot.set_state(SlotState::Unreachable);
            }
            Err(GrantorError::Refused { .. }) => {
                // Closed, expired or revoked at the grantor: stop spending it; a later
                // request for the key asks for a new lease.
                let h = self.held.remove(&k).expect("present");
                self.release(h).await;
            }
        }
    }

    /// Closes the slot and releases the lease with its exact final usage.
    async fn release(&mut self, h: Held) {
        let unspent = h.slot.close();
        let final_used = (h.deposited - h.withdrawn)
            .saturating_sub(unspent)
            .max(h.reported_used);
        let r = pb::ReleaseRequest {
            holder_id: self.cfg.holder_id.clone(),
            lease_id: h.lease_id,
            final_used,
            request_id: self.request_id(),
        };
        self.counters.releases += 1;
        if let Ok(resp) = self.grantor.release(r).await {
            self.counters.reclaimed += resp.reclaimed;
        }
        h.slot.set_state(SlotState::Idle);
    }

    /// Releases every lease (graceful shutdown).
    pub async fn release_all(&mut self) {
        let all = std::mem::take(&mut self.held);
        for (_, h) in all {
            self.release(h).await;
        }
    }
}
