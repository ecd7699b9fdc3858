//! Honest accounting (P7): every unit offered to a policy lands in exactly one counter.
//!
//! Counters are per policy id, never per key, so their number is bounded by the rule set.
//! The engine-wide ones share each thread slot's stripe with that slot's clock guard (P3),
//! so that a decision finds its number, its count and its guarded time in one place.

use super::decision::Outcome;
use super::stripes::{
    add, stripe_count, sum, sum_of, ClockStripe, Local, Padded, PerSlot, Slot, Striped,
};
use leasehold_common::time::{Nanos, RollbackStats};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a dimension's units are booked; `offered` is the sum of all of them.
const ADMITTED: usize = 0;
const REJECTED: usize = 1;
const ROLLED_BACK: usize = 2;
const NOT_EVALUATED: usize = 3;
const SHADOW_DENIED: usize = 4;
const FAIL_OPEN: usize = 5;
const RESTRICTED: usize = 6;
const KILL_SWITCH: usize = 7;
const POLICY_COUNTERS: usize = 8;

/// Live counters of one policy, in units (cost × hits), one set per thread stripe so that
/// threads deciding for the same policy do not share a written line.
#[derive(Debug)]
pub(crate) struct PolicyCounters {
    stripes: Striped<[AtomicU64; POLICY_COUNTERS]>,
}

impl Default for PolicyCounters {
    fn default() -> Self {
        // Threads take the lowest free slots, so the busy threads of a process sized to
        // its cores mostly own one of the first few; twice the cores leaves room for the
        // runtime's other threads.
        let cores = stripe_count();
        PolicyCounters {
            stripes: Striped::owned_first(2 * cores, cores),
        }
    }
}

impl PolicyCounters {
    /// Books `units` offered to the policy under the dimension's final outcome.
    #[inline]
    pub(crate) fn record(&self, outcome: Outcome, units: u64, slot: Slot) {
        let index = match outcome {
            Outcome::Admitted => ADMITTED,
            Outcome::Denied(_) | Outcome::InvalidKey => REJECTED,
            Outcome::RolledBack => ROLLED_BACK,
            Outcome::Skipped => NOT_EVALUATED,
            Outcome::ShadowDenied(_) => SHADOW_DENIED,
            Outcome::FailOpen => FAIL_OPEN,
            Outcome::Restricted => RESTRICTED,
            Outcome::KillSwitch => KILL_SWITCH,
            // The policy was not applied to the request: nothing was offered to it.
            Outcome::NoRule | Outcome::Unlimited | Outcome::Replaced => return,
        };
        let local = self.stripes.at(slot);
        add(&local.value[index], units, local.exclusive);
    }

    pub(crate) fn snapshot(&self) -> PolicyCountersSnapshot {
        let get = |i: usize| sum(&self.stripes, |s| &s[i]);
        let by: [u64; POLICY_COUNTERS] = std::array::from_fn(get);
        PolicyCountersSnapshot {
            offered: by.iter().fold(0u64, |a, b| a.wrapping_add(*b)),
            admitted: by[ADMITTED],
            rejected: by[REJECTED],
            rolled_back: by[ROLLED_BACK],
            not_evaluated: by[NOT_EVALUATED],
            shadow_denied: by[SHADOW_DENIED],
            fail_open: by[FAIL_OPEN],
            restricted: by[RESTRICTED],
            kill_switch: by[KILL_SWITCH],
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

/// Engine-wide counters (requests, not units), one set per thread slot.
#[derive(Debug)]
pub(crate) struct EngineCounters {
    stripes: PerSlot<EngineStripe>,
    /// Next unissued decision id; threads take blocks of [`ID_BLOCK`].
    ids: Padded<AtomicU64>,
}

/// Decision ids a thread owning its slot takes at once.
const ID_BLOCK: u64 = 1024;

/// What one thread slot writes for every decision, in one place so that a decision finds
/// it once: its clock guard, its count and numbering, and its other counts.
#[derive(Debug)]
struct EngineStripe {
    clock: ClockStripe,
    decisions: AtomicU64,
    /// The slot's block of ids: `next_id..end_id` are unissued.
    next_id: AtomicU64,
    end_id: AtomicU64,
    counts: [AtomicU64; ENGINE_COUNTS],
}

/// Engine-wide request counters besides decisions.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Count {
    SelfProtectionDenied,
    TooManyDimensions,
    TableFull,
    AcquireQueueFull,
    UnknownPolicy,
    ZeroLimitDenied,
    ShapedAdmitted,
    ShapedWaitingFull,
}
const ENGINE_COUNTS: usize = 8;

impl EngineStripe {
    fn starting_at(start: Nanos) -> Self {
        EngineStripe {
            clock: ClockStripe::starting_at(start),
            decisions: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            end_id: AtomicU64::new(0),
            counts: Default::default(),
        }
    }
}

impl EngineCounters {
    /// Counters of an engine whose time starts at `start` (earlier readings are clamped).
    pub(crate) fn new(start: Nanos) -> Self {
        EngineCounters {
            stripes: PerSlot::from_fn(|| EngineStripe::starting_at(start)),
            ids: Padded::default(),
        }
    }

    /// A raw time reading through the calling thread's clock guard, which never lets time
    /// go back (P3): a reading behind the stripe's last one is clamped to it and counted.
    pub(crate) fn observe(&self, raw: Nanos) -> Nanos {
        let local = self.stripes.local_slot();
        local.value.clock.observe(raw, local.exclusive)
    }

    /// Readings clamped so far, over every stripe.
    pub(crate) fn clock_stats(&self) -> RollbackStats {
        RollbackStats {
            rollbacks: sum_of(self.stripes.iter(), |s| &s.clock.rollbacks),
            rollback_ns: sum_of(self.stripes.iter(), |s| &s.clock.rollback_ns),
        }
    }

    /// Starts a decision on `slot` at raw time `raw`: its number (see
    /// [`next_decision`](Self::next_decision)) and its guarded time, from one stripe.
    #[inline]
    pub(crate) fn start_decision(&self, raw: Nanos, slot: Slot) -> (u64, Nanos) {
        let local = self.stripes.at(slot);
        let number = self.next_decision(local);
        (number, local.value.clock.observe(raw, local.exclusive))
    }

    #[inline]
    pub(crate) fn bump(&self, count: Count) {
        let local = self.stripes.local_slot();
        add(&local.value.counts[count as usize], 1, local.exclusive);
    }

    pub(crate) fn load(&self, count: Count) -> u64 {
        sum_of(self.stripes.iter(), |s| &s.counts[count as usize])
    }

    pub(crate) fn decisions(&self) -> u64 {
        sum_of(self.stripes.iter(), |s| &s.decisions)
    }

    /// Counts a decision and numbers it. Numbers are unique until the engine has issued
    /// 2⁶⁴ (callers keep the low bits); a thread owning its slot takes them a block at a
    /// time, so the shared counter moves once per [`ID_BLOCK`] decisions.
    #[inline]
    fn next_decision(&self, local: Local<'_, EngineStripe>) -> u64 {
        let s = local.value;
        add(&s.decisions, 1, local.exclusive);
        if !local.exclusive {
            return self.ids.0.fetch_add(1, Ordering::Relaxed);
        }
        let next = s.next_id.load(Ordering::Relaxed);
        if next < s.end_id.load(Ordering::Relaxed) {
            s.next_id.store(next + 1, Ordering::Relaxed);
            return next;
        }
        let base = self.ids.0.fetch_add(ID_BLOCK, Ordering::Relaxed);
        s.next_id.store(base + 1, Ordering::Relaxed);
        s.end_id.store(base + ID_BLOCK, Ordering::Relaxed);
        base
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
    /// Dimensions naming a policy id the rule set does not have (refused, or admitted as
    /// no rule, as the engine's [`UnknownPolicy`](super::UnknownPolicy) setting says).
    pub unknown_policy: u64,
    /// Dimensions refused by an envoyproxy/ratelimit rule with `requests_per_unit: 0`.
    pub zero_limit_denied: u64,
    /// Requests a shaping policy admitted with a delay.
    pub shaped_admitted: u64,
    /// Requests a shaping policy refused, although their units were available within its
    /// `max_delay`, because `shaped_waiting_max` requests were already waiting.
    pub shaped_waiting_full: u64,
    /// The cap on requests admitted with a delay and not departed yet (those waiting now:
    /// [`Engine::shaped_waiting`](super::Engine::shaped_waiting)).
    pub shaped_waiting_max: usize,
    /// Keys held now, the cap, and entries dropped so far.
    pub keys: usize,
    pub keys_max: usize,
    pub evictions: u64,
    /// Time readings that went backwards and were clamped (P3).
    pub clock: RollbackStats,
    /// When the allocator last confirmed the policies, for an agent that takes them from it.
    pub policy_sync: Option<super::PolicySyncStats>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_common::time::ClockGuard;

    #[test]
    fn one_thread_matches_the_single_owner_guard() {
        let striped = EngineCounters::new(Nanos(2));
        let mut single = ClockGuard::new(Nanos(2));
        // Readings before the start are clamped to it, as later ones to the last.
        for raw in [1u64, 2, 5, 3, 9, 9, 1, 20, 19, 0, 21] {
            assert_eq!(striped.observe(Nanos(raw)), single.observe(Nanos(raw)));
        }
        assert_eq!(striped.clock_stats(), single.stats());
    }

    #[test]
    fn each_thread_is_monotonic_and_rollbacks_sum() {
        let counters = EngineCounters::new(Nanos(0));
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let counters = &counters;
                s.spawn(move || {
                    let mut last = 0;
                    for i in 0..2_000u64 {
                        // Every tenth reading steps back by 5 (the main thread's own slot
                        // is taken, so these threads may share stripes or not).
                        let raw = if i % 10 == 9 { i + t - 5 } else { i + t };
                        let seen = counters.observe(Nanos(raw)).0;
                        assert!(seen >= last, "time went back on one thread");
                        last = seen;
                    }
                });
            }
        });
        assert!(
            counters.clock_stats().rollbacks >= 3 * 199,
            "each thread's steps back count"
        );
    }

    #[test]
    fn a_decision_takes_its_number_and_time_from_one_stripe() {
        let counters = EngineCounters::new(Nanos(10));
        let slot = Slot::current();
        let (first, at) = counters.start_decision(Nanos(4), slot);
        let (second, later) = counters.start_decision(Nanos(12), slot);
        assert_eq!(
            (at, later),
            (Nanos(10), Nanos(12)),
            "clamped to the start, then on"
        );
        assert_ne!(first, second);
        assert_eq!(counters.decisions(), 2);
        assert_eq!(counters.clock_stats().rollbacks, 1);
    }
}
