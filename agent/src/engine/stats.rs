//! Honest accounting (P7): every unit offered to a policy lands in exactly one counter.
//!
//! Counters are per policy id, never per key, so their number is bounded by the rule set.

use super::decision::Outcome;
use leasehold_common::time::RollbackStats;
use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one policy, in units (cost × hits).
#[derive(Debug, Default)]
pub(crate) struct PolicyCounters {
    offered: AtomicU64,
    admitted: AtomicU64,
    rejected: AtomicU64,
    rolled_back: AtomicU64,
    not_evaluated: AtomicU64,
    shadow_denied: AtomicU64,
    fail_open: AtomicU64,
    restricted: AtomicU64,
    kill_switch: AtomicU64,
}

fn add(counter: &AtomicU64, units: u64) {
    counter.fetch_add(units, Ordering::Relaxed);
}

impl PolicyCounters {
    /// Books `units` offered to the policy under the dimension's final outcome.
    pub(crate) fn record(&self, outcome: Outcome, units: u64) {
        let counter = match outcome {
            Outcome::Admitted => &self.admitted,
            Outcome::Denied(_) | Outcome::InvalidKey => &self.rejected,
            Outcome::RolledBack => &self.rolled_back,
            Outcome::Skipped => &self.not_evaluated,
            Outcome::ShadowDenied(_) => &self.shadow_denied,
            Outcome::FailOpen => &self.fail_open,
            Outcome::Restricted => &self.restricted,
            Outcome::KillSwitch => &self.kill_switch,
            // The policy was not applied to the request: nothing was offered to it.
            Outcome::NoRule | Outcome::Unlimited | Outcome::Replaced => return,
        };
        add(&self.offered, units);
        add(counter, units);
    }

    pub(crate) fn snapshot(&self) -> PolicyCountersSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PolicyCountersSnapshot {
            offered: get(&self.offered),
            admitted: get(&self.admitted),
            rejected: get(&self.rejected),
            rolled_back: get(&self.rolled_back),
            not_evaluated: get(&self.not_evaluated),
            shadow_denied: get(&self.shadow_denied),
            fail_open: get(&self.fail_open),
            restricted: get(&self.restricted),
            kill_switch: get(&self.kill_switch),
        }
    }
}

/// One policy's counters, in units. `offered` is the sum of all the others (read at one
/// instant without traffic; under traffic each counter is read separately).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyCountersSnapshot {
    pub offered: u64,
    /// Charged against the limit and kept.
    pub admitted: u64,
    /// Refused by this policy (over limit, invalid key, unreachable, restricted).
    pub rejected: u64,
    /// Admitted by this policy, then given back because another dimension refused.
    pub rolled_back: u64,
    /// Not checked because an earlier dimension refused.
    pub not_evaluated: u64,
    /// Would have been refused; admitted because the policy is in shadow mode.
    pub shadow_denied: u64,
    /// Admitted uncharged under fail-open (counted apart, P1).
    pub fail_open: u64,
    /// Admitted at the local emergency rate while restricted.
    pub restricted: u64,
    /// Admitted because the kill switch is on.
    pub kill_switch: u64,
}

/// One policy's counters with its identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyStats {
    pub policy_id: String,
    pub version: u64,
    pub counters: PolicyCountersSnapshot,
}

/// Engine-wide counters (requests, not units).
#[derive(Debug, Default)]
pub(crate) struct EngineCounters {
    pub(crate) decisions: AtomicU64,
    pub(crate) self_protection_denied: AtomicU64,
    pub(crate) too_many_dimensions: AtomicU64,
    pub(crate) table_full: AtomicU64,
    pub(crate) acquire_queue_full: AtomicU64,
    pub(crate) unknown_policy: AtomicU64,
    pub(crate) zero_limit_denied: AtomicU64,
}

impl EngineCounters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A snapshot of everything the engine counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineStats {
    /// Policies of the current rule set, by id.
    pub policies: Vec<PolicyStats>,
    pub decisions: u64,
    /// Requests refused by the engine's own self-protection bucket.
    pub self_protection_denied: u64,
    /// Requests refused for carrying more than `dimensions_max` dimensions.
    pub too_many_dimensions: u64,
    /// Dimensions sent to their policy's overflow key because the key table was full.
    pub table_full: u64,
    /// First-lease requests that found the acquire queue full.
    pub acquire_queue_full: u64,
    /// Dimensions naming a policy id the rule set does not have (admitted as no rule).
    pub unknown_policy: u64,
    /// Dimensions refused by an envoyproxy/ratelimit rule with `requests_per_unit: 0`.
    pub zero_limit_denied: u64,
    /// Keys held now, the cap, and entries dropped so far.
    pub keys: usize,
    pub keys_max: usize,
    pub evictions: u64,
    /// Time readings that went backwards and were clamped (P3).
    pub clock: RollbackStats,
}

impl EngineCounters {
    pub(crate) fn load(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
