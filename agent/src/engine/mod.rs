//! The enforcement engine: in-process admission against leased credit and local limits.
//!
//! An [`Engine`] holds a rule set (Leasehold policies and envoyproxy/ratelimit rules) and
//! per-key state, and answers [`Engine::admit`] without I/O. A request names one or more
//! dimensions; every dimension must admit or none is charged (charges are made in request
//! order and undone in reverse when a later one refuses).
//!
//! How a policy's keys are enforced:
//!
//! * **Leased credit** (scope `global`, `region` or `cell`; `token_bucket` or `gcra`): each
//!   key has a [`CreditSlot`](crate::credit::CreditSlot) filled by the lease manager. The
//!   first use of a key queues an [`AcquireRequest`]; while the slot waits for its first
//!   lease requests are refused as [`DenyReason::AwaitingLease`], and once it has waited
//!   longer than `acquire_wait_max_ns` (or the grantor is unreachable) the policy's failure
//!   behaviour decides: `fail_closed` refuses, `cached_lease` spends what is left until the
//!   lease deadline, `fail_open` admits uncharged (counted apart), `restricted` admits only
//!   priority ≥ `min_priority` at a local emergency rate.
//! * **Local** (scope `process`, or a window, calendar or concurrency algorithm): a limiter
//!   per key in this process. Concurrency admissions hold units in the decision's
//!   [`InFlight`] guard until it is dropped.
//!
//! **Shaping.** A local key of a policy with `shape` charges a request that accepts a delay
//! ([`AdmitRequest::accept_delay`], one dimension only) at the earliest time within
//! `max_delay` its units exist, answering [`Decision::delay_ns`]; at most
//! `shaped_waiting_max` such requests wait at once (see `shaped`). A leased key of such a
//! policy spends its held credit when it decides and paces the departures at the policy's
//! rate (see `paced`).
//!
//! Overrides, in order: the policy's kill switch admits everything (counted apart); an
//! operator's [`Emergency`] (`fail_open`, `restricted`) replaces normal enforcement; shadow
//! mode turns every refusal into `ShadowDenied`, admitted and uncharged.
//!
//! **With the lease manager.** The manager drains [`Engine::take_acquire_queue`], deposits
//! granted credit into each request's slot and moves its state (`Active`, `Denied`,
//! `Unreachable`, back to `Idle` after releasing). The engine may drop an idle key's entry
//! while the manager still holds its slot; a later request for that key then queues a new
//! acquire with a new slot, so the manager should release (or hand over) the old lease for
//! that key rather than hold two.
//!
//! A dimension naming a policy id the rule set does not have is refused, or admitted as no
//! rule, as the engine's [`UnknownPolicy`] setting says (refused by default).
//!
//! The hot path allocates nothing for existing keys nor on any refusal (P5), and on
//! existing keys writes no cache line shared by every thread other than the key's own
//! state: each thread keeps the rule set it last loaded (checked against a version
//! number), a hint per policy id and its recently used keys (checked against the
//! table's entry: same key and policy generation, not removed); keys are built in a
//! thread-local buffer (the common case by copying slices) and hashed once; a miss reads a
//! single-level sharded table under a lock whose readers count themselves per thread.
//! Results (policy ids included) are written in place in the [`Decision`]
//! ([`Engine::admit_into`] reuses one); decision ids, counters and the monotonic guard are
//! kept per thread and summed when read. Demand is recorded on refusals only: what was
//! spent is known from the slot's credit. Time readings that step back on a thread are
//! clamped and counted (P3).

mod acquire;
mod admit;
mod bytes;
mod check;
mod config;
mod decision;
mod domains;
mod earn;
mod epoch;
mod exact;
mod fastkey;
mod forget;
mod leased;
mod local;
mod overrides;
mod paced;
mod policy;
mod policy_sync;
mod protect;
mod readlock;
mod request;
mod resolve;
mod results;
mod resume;
mod rules;
mod saved;
mod shaped;
mod spin;
mod stats;
mod stripes;
mod table;
mod tcache;
mod undo;

/// The hand-written synchronisation, reachable by the loom models in `tests/loom_*.rs`
/// (built only with `--cfg leasehold_loom`; see `crate::sync`).
#[cfg(leasehold_loom)]
#[doc(hidden)]
pub mod models {
    pub use super::readlock::ReadStripedLock;
    pub use super::spin::{SpinGuard, SpinLock};
    pub use super::undo::model::{Request, TableEntry, Unit, Watch};

    /// The models' explorer: at most three preemptions per execution unless
    /// `LOOM_MAX_PREEMPTIONS` says otherwise, which keeps every model to seconds.
    pub fn bounded() -> loom::model::Builder {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(3);
        }
        builder
    }
}

pub use acquire::{AcquireReceiver, AcquireRequest};
pub use config::{
    EngineBuilder, EngineLimits, UnknownPolicy, WallClock, ACQUIRE_QUEUE_MAX_DEFAULT,
    ACQUIRE_WAIT_MAX_NS_DEFAULT, ENVOY_KEY_LEN_MAX_DEFAULT, KEYS_MAX_DEFAULT, KEY_IDLE_NS_DEFAULT,
    SHAPED_WAITING_MAX_DEFAULT, SHARDS_DEFAULT,
};
pub use decision::{
    Decision, Denial, DenyReason, DimensionResult, InFlight, Outcome, PolicyId, DIMENSIONS_LIMIT,
    POLICY_ID_INLINE_MAX,
};
pub use exact::{ExactAsk, ExactVerdict, ExactVerdicts};
pub use local::LocalConfigError;
pub use overrides::{OverrideError, OverrideRule, ENVOY_OVERRIDES_MAX};
pub use policy::Emergency;
pub use policy_sync::PolicySyncStats;
pub use protect::SelfProtection;
pub use request::{AdmitRequest, Dimension, Target};
pub use results::Results;
pub use rules::{EngineError, RuleSource, ENVOY_POLICY_VERSION};
pub use saved::{SavedLimiter, SavedState};
pub use stats::{EngineStats, PolicyCountersSnapshot, PolicyStats};

use arc_swap::ArcSwap;
use leasehold_common::policy::envoy::{EnvoyConfig, MatchedRule};
use leasehold_common::policy::PolicyVersion;
use leasehold_common::time::Nanos;
use parking_lot::Mutex;
use protect::Protector;
use rules::RuleSet;
use stats::{Count, EngineCounters};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use table::KeyTable;

/// A grantor that answered the lease manager within this long counts as reachable: a key
/// waiting longer than `acquire_wait_max_ns` for its first lease then waits on (its request
/// is queued behind others, or the grantor is slow) rather than being failed as unreachable.
pub const GRANTOR_ANSWERED_WITHIN_NS: u64 = 2_000_000_000;

/// The in-process admission engine. Share it behind an `Arc`; every method takes `&self`.
pub struct Engine {
    rules: ArcSwap<RuleSet>,
    /// The stamp of `rules`, renewed after every change of them, so threads know their
    /// cached set is stale.
    rules_stamp: AtomicU64,
    /// Tells this engine's state apart in threads' caches.
    uid: u64,
    /// Serialises reloads so that each builds on the rule set it replaces.
    reload_lock: Mutex<()>,
    table: KeyTable,
    limits: EngineLimits,
    rule_options: rules::RuleOptions,
    unknown_policy: UnknownPolicy,
    instance_id: u32,
    protector: Option<Protector>,
    wall_clock: WallClock,
    unix_offset: epoch::UnixOffset,
    acquire_tx: SyncSender<AcquireRequest>,
    acquire_rx: Mutex<Option<AcquireReceiver>>,
    /// When the lease manager last had an answer from the grantor (monotonic ns, 0: none
    /// yet, or its last call found the grantor unreachable).
    grantor_answered_ns: AtomicU64,
    policy_sync: policy_sync::PolicySync,
    counters: EngineCounters,
    /// Requests admitted with a delay and not departed yet, capped.
    waiting: shaped::Waiting,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("instance_id", &self.instance_id)
            .field("limits", &self.limits)
            .field("keys", &self.table.len())
            .finish_non_exhaustive()
    }
}

impl EngineBuilder {
    /// Builds an engine enforcing `rules`.
    pub fn build(self, rules: RuleSource) -> Result<Engine, EngineError> {
        self.limits.check()?;
        let options = rules::RuleOptions::new(&self.limits, self.envoy_count_denied);
        let wall = (self.wall_clock)();
        let set = RuleSet::build(rules, None, &options, wall)?;
        let (acquire_tx, acquire_rx) = acquire::channel(self.limits.acquire_queue_max);
        let stripes = stripes::stripe_count();
        Ok(Engine {
            rules: ArcSwap::from_pointee(set),
            rules_stamp: AtomicU64::new(tcache::next_rules_stamp()),
            uid: tcache::next_engine_uid(),
            reload_lock: Mutex::new(()),
            table: KeyTable::new(
                self.limits.keys_max,
                self.limits.shards,
                self.limits.key_idle_ns,
                stripes,
            ),
            limits: self.limits,
            rule_options: options,
            unknown_policy: self.unknown_policy,
            instance_id: self.instance_id,
            protector: self.self_protection.map(|s| Protector::new(s, self.start)),
            unix_offset: epoch::UnixOffset::new(wall, self.start),
            wall_clock: self.wall_clock,
            acquire_tx,
            acquire_rx: Mutex::new(Some(acquire_rx)),
            grantor_answered_ns: AtomicU64::new(0),
            policy_sync: Default::default(),
            counters: EngineCounters::new(self.start),
            waiting: shaped::Waiting::new(self.limits.shaped_waiting_max),
        })
    }
}

impl Engine {
    pub fn builder() -> EngineBuilder {
        EngineBuilder::new()
    }

    fn store_rules(&self, set: RuleSet) {
        self.rules.store(Arc::new(set));
        // After the store: a thread that sees the new stamp loads at least this set.
        let stamp = tcache::next_rules_stamp();
        self.rules_stamp.store(stamp, Ordering::Release);
    }

    /// What dimensions naming an unknown policy id get.
    pub fn unknown_policy(&self) -> UnknownPolicy {
        self.unknown_policy
    }

    /// Replaces the rule set atomically. Policies whose id, version and content did not
    /// change keep their keys' state; every id keeps its counters and emergency. Requests
    /// in flight finish under the rule set they started with.
    pub fn reload(&self, rules: RuleSource) -> Result<(), EngineError> {
        let _guard = self.reload_lock.lock();
        let old = self.rules.load_full();
        let wall = (self.wall_clock)();
        let set = RuleSet::build(rules, Some(&old), &self.rule_options, wall)?;
        self.store_rules(set);
        Ok(())
    }

    /// Replaces the envoyproxy/ratelimit rules read from a local file, keeping every
    /// policy; atomic as [`reload`](Self::reload) is, and unchanged rules keep their
    /// counts. On an error nothing changes.
    pub fn reload_envoy(&self, envoy: EnvoyConfig) -> Result<(), EngineError> {
        let _guard = self.reload_lock.lock();
        let old = self.rules.load_full();
        let mut source = old.source.clone();
        source.envoy = Some(envoy);
        let wall = (self.wall_clock)();
        let set = RuleSet::build(source, Some(&old), &self.rule_options, wall)?;
        self.store_rules(set);
        Ok(())
    }

    /// Installs `pv` in place of the versions of its id (the allocator's watch stream
    /// carries the newest version of a policy). Older versions stay only while `pv` is not
    /// yet in force. Returns false, changing nothing, if this or a newer version is given.
    pub fn install_policy(&self, pv: PolicyVersion) -> Result<bool, EngineError> {
        let _guard = self.reload_lock.lock();
        let old = self.rules.load_full();
        let id = pv.policy.id.as_str();
        let same_id = |p: &&PolicyVersion| p.policy.id == id;
        if old
            .source
            .policies
            .iter()
            .filter(same_id)
            .any(|p| p.version >= pv.version)
        {
            return Ok(false);
        }
        let wall = (self.wall_clock)();
        let pending = pv.policy.effective_at.is_some_and(|at| at > wall);
        let mut source = old.source.clone();
        source.policies.retain(|p| p.policy.id != id || pending);
        source.policies.push(pv);
        let set = RuleSet::build(source, Some(&old), &self.rule_options, wall)?;
        self.store_rules(set);
        Ok(true)
    }

    /// Removes every version of policy `id`; returns whether there was one.
    pub fn remove_policy(&self, id: &str) -> Result<bool, EngineError> {
        let _guard = self.reload_lock.lock();
        let old = self.rules.load_full();
        let mut source = old.source.clone();
        source.policies.retain(|p| p.policy.id != id);
        if source.policies.len() == old.source.policies.len() {
            return Ok(false);
        }
        let wall = (self.wall_clock)();
        let set = RuleSet::build(source, Some(&old), &self.rule_options, wall)?;
        self.store_rules(set);
        Ok(true)
    }

    /// Ids of the policies in force.
    pub fn policy_ids(&self) -> Vec<String> {
        let rules = self.rules.load();
        rules.policies.iter().map(|p| p.id.to_string()).collect()
    }

    /// The earliest `effective_at` of a given policy version not yet in force.
    pub fn next_activation(&self) -> Option<jiff::Timestamp> {
        self.rules.load().pending_at
    }

    /// Brings versions whose `effective_at` has passed into force (call it periodically).
    /// Returns whether the rule set changed.
    pub fn reload_due(&self) -> Result<bool, EngineError> {
        let due = {
            let rules = self.rules.load();
            match rules.pending_at {
                Some(at) if at <= (self.wall_clock)() => Some(rules.source.clone()),
                _ => None,
            }
        };
        match due {
            Some(source) => self.reload(source).map(|()| true),
            None => Ok(false),
        }
    }

    /// Sets an operator's emergency override for `policy_id` (for a domain document, on
    /// each of its rules); it lasts across reloads of the same id until set back to
    /// [`Emergency::Normal`].
    pub fn set_emergency(&self, policy_id: &str, emergency: Emergency) -> Result<(), EngineError> {
        let rules = self.rules.load();
        if let Some(policy) = rules.policy(policy_id) {
            policy.runtime.emergency.set(emergency);
            return Ok(());
        }
        let rule_policies =
            rules
                .document_policies(policy_id)
                .ok_or_else(|| EngineError::UnknownPolicy {
                    id: policy_id.to_owned(),
                })?;
        for policy in rule_policies {
            policy.runtime.emergency.set(emergency);
        }
        Ok(())
    }

    /// Calls `f` with the envoyproxy/ratelimit rule a descriptor with `entries` matches in
    /// `domain` now, if any (what a response reports as the descriptor's current limit).
    pub fn with_envoy_rule<R>(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        f: impl FnOnce(Option<&MatchedRule>) -> R,
    ) -> R {
        let rules = self.rules.load();
        f(rules.envoy.lookup(domain, entries))
    }

    /// envoyproxy/ratelimit domains enforced now, sorted.
    pub fn envoy_domains(&self) -> Vec<String> {
        let rules = self.rules.load();
        rules.envoy.domains().map(str::to_owned).collect()
    }

    /// The receiving end of the first-lease queue, for the lease manager. Given out once.
    pub fn take_acquire_queue(&self) -> Option<AcquireReceiver> {
        self.acquire_rx.lock().take()
    }

    /// The lease manager had an answer from the grantor at `now` (any answer: a grant, a
    /// denial, a refusal). A first lease awaited past `acquire_wait_max_ns` while the
    /// grantor answers is still awaited, not taken for an unreachable grantor.
    pub fn note_grantor_answered(&self, now: Nanos) {
        self.grantor_answered_ns
            .fetch_max(now.0.max(1), Ordering::Relaxed);
    }

    /// This engine's policies come from the allocator's watch stream, and count as stale
    /// once unconfirmed for `stale_after_ms`.
    pub fn follow_allocator_policies(&self, stale_after_ms: u64) {
        self.policy_sync.follow(stale_after_ms);
    }

    /// The watch stream confirmed the policies as the allocator's current ones at
    /// `unix_ms`.
    pub fn policies_confirmed(&self, unix_ms: u64) {
        self.policy_sync.confirmed(unix_ms);
    }

    /// The lease manager could not reach the grantor: keys past their wait for a first
    /// lease get their policy's failure behaviour until it answers again.
    pub fn note_grantor_unreachable(&self) {
        self.grantor_answered_ns.store(0, Ordering::Relaxed);
    }

    /// Whether the grantor answered within [`GRANTOR_ANSWERED_WITHIN_NS`] before `now`.
    pub(crate) fn grantor_answering(&self, now: Nanos) -> bool {
        match self.grantor_answered_ns.load(Ordering::Relaxed) {
            0 => false,
            at => now.0.saturating_sub(at) <= GRANTOR_ANSWERED_WITHIN_NS,
        }
    }

    /// Drops the keys that may be forgotten at `now` (local limits at rest, leased and
    /// per-request keys idle for `key_idle_ns`) and keys of policies no longer in the rule
    /// set; returns how many. Call it periodically; a full shard also drops such keys on
    /// demand.
    pub fn sweep(&self, now: Nanos) -> usize {
        let now = self.counters.observe(now);
        let at = local::LocalTime::from_unix(now, self.unix_offset.get());
        let rules = self.rules.load();
        let live: std::collections::HashSet<u64> =
            rules.policies.iter().map(|p| p.generation).collect();
        self.table
            .sweep(at, |generation| live.contains(&generation))
    }

    /// Requests admitted with a delay whose departure is after `now`.
    pub fn shaped_waiting(&self, now: Nanos) -> usize {
        self.waiting.count(now)
    }

    /// The request `decision` admitted with a delay has gone (its departure time came):
    /// its place among the waiting requests is free now rather than when the engine next
    /// notices the time. Nothing happens for a decision without delay.
    pub fn shaped_departed(&self, decision: &Decision) {
        if decision.delay_ns > 0 {
            self.waiting.release(decision.departs_at);
        }
    }

    /// Keys in the key table now.
    pub fn key_count(&self) -> usize {
        self.table.len()
    }

    /// A snapshot of every counter.
    pub fn stats(&self) -> EngineStats {
        let rules = self.rules.load();
        let c = &self.counters;
        EngineStats {
            policies: rules
                .policies
                .iter()
                .map(|p| PolicyStats {
                    policy_id: p.id.to_string(),
                    version: p.version,
                    counters: p.runtime.counters.snapshot(),
                })
                .collect(),
            decisions: c.decisions(),
            self_protection_denied: c.load(Count::SelfProtectionDenied),
            too_many_dimensions: c.load(Count::TooManyDimensions),
            table_full: c.load(Count::TableFull),
            acquire_queue_full: c.load(Count::AcquireQueueFull),
            unknown_policy: c.load(Count::UnknownPolicy),
            zero_limit_denied: c.load(Count::ZeroLimitDenied),
            shaped_admitted: c.load(Count::ShapedAdmitted),
            shaped_waiting_full: c.load(Count::ShapedWaitingFull),
            shaped_waiting_max: self.waiting.max(),
            keys: self.table.len(),
            keys_max: self.table.capacity(),
            evictions: self.table.evictions(),
            clock: self.counters.clock_stats(),
            policy_sync: self.policy_sync.stats(),
        }
    }
}
