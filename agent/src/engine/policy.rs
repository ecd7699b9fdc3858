//! A policy prepared for the hot path, and the per-policy state that outlives reloads.

use super::decision::PolicyId;
use super::earn::EarnRate;
use super::fastkey::FastKey;
use super::local::LocalSpec;
use super::spin::SpinLock;
use super::stats::PolicyCounters;
use super::table::{Entry, EntryState};
use crate::credit::CreditSlot;
use leasehold_common::key::KeySchema;
use leasehold_common::policy::{Algorithm, FailureMode, Policy, Scope};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// An operator's override of a policy's failure behaviour, pushed by the allocator.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Emergency {
    /// The policy's own rules apply.
    Normal,
    /// Admit every request, uncharged, counted apart as fail-open.
    FailOpen,
    /// Admit only priority ≥ `min_priority`, at most at `rate` per key (a local bucket
    /// holding one period's worth).
    Restricted { min_priority: u8, rate: Rate },
}

const MODE_NORMAL: u8 = 0;
const MODE_FAIL_OPEN: u8 = 1;
const MODE_RESTRICTED: u8 = 2;

/// The current emergency of one policy: the mode is one atomic read on the hot path; the
/// restricted parameters are read only while restricted.
#[derive(Debug, Default)]
pub(crate) struct EmergencyCell {
    mode: AtomicU8,
    restricted: Mutex<Option<(u8, Rate)>>,
}

impl EmergencyCell {
    pub(crate) fn set(&self, emergency: Emergency) {
        let mode = match emergency {
            Emergency::Normal => MODE_NORMAL,
            Emergency::FailOpen => MODE_FAIL_OPEN,
            Emergency::Restricted { min_priority, rate } => {
                *self.restricted.lock() = Some((min_priority, rate));
                MODE_RESTRICTED
            }
        };
        self.mode.store(mode, Ordering::Release);
    }

    #[inline]
    pub(crate) fn get(&self) -> Emergency {
        match self.mode.load(Ordering::Acquire) {
            MODE_FAIL_OPEN => Emergency::FailOpen,
            MODE_RESTRICTED => match *self.restricted.lock() {
                Some((min_priority, rate)) => Emergency::Restricted { min_priority, rate },
                None => Emergency::Normal,
            },
            _ => Emergency::Normal,
        }
    }
}

/// What survives a reload of the same policy id: its counters and its emergency.
#[derive(Debug, Default)]
pub(crate) struct PolicyRuntime {
    pub(crate) counters: PolicyCounters,
    pub(crate) emergency: EmergencyCell,
}

/// How a policy's keys are enforced.
#[derive(Clone, Debug)]
pub(crate) enum Enforcement {
    /// Credit leased from the allocator: every algorithm but concurrency whose scope is
    /// global, region or cell (windows and calendar periods as window-scoped credit).
    Leased,
    /// Decided per request by the owning allocator (`enforcement: exact`); nothing is held
    /// here.
    Exact,
    Local(LocalSpec),
    Concurrency {
        max_in_flight: u64,
    },
}

/// The restricted failure behaviour's parameters.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct RestrictedSpec {
    pub(crate) min_priority: u8,
    pub(crate) rate: Rate,
}

/// One policy version as the hot path uses it.
#[derive(Debug)]
pub(crate) struct CompiledPolicy {
    pub(crate) id: Arc<str>,
    /// `id`, for decisions.
    pub(crate) pid: PolicyId,
    pub(crate) version: u64,
    /// Unique per compiled version; key state built for another generation is rebuilt.
    pub(crate) generation: u64,
    pub(crate) policy: Policy,
    pub(crate) schema: KeySchema,
    /// The common case of building this policy's keys.
    pub(crate) fast_key: FastKey,
    pub(crate) enforcement: Enforcement,
    pub(crate) capacity: u64,
    /// What one request costs when the cost is per request (not by bytes or route).
    pub(crate) request_cost: Option<u64>,
    /// [`ns_to_earn`](Self::ns_to_earn) of `request_cost`, worked out once: a refusal's
    /// retry hint is then a read rather than a division.
    pub(crate) request_earn_ns: u64,
    pub(crate) rate: Option<EarnRate>,
    pub(crate) failure: FailureMode,
    pub(crate) restricted: Option<RestrictedSpec>,
    pub(crate) shadow: bool,
    /// `shape.max_delay` in ns; 0 when the policy does not shape (or is in shadow mode,
    /// which never makes a request wait).
    pub(crate) max_delay_ns: u64,
    pub(crate) runtime: Arc<PolicyRuntime>,
    /// The shared state of the policy's overflow key, kept out of the key table so that
    /// overflow always has a place even when the table is full.
    pub(crate) overflow: OnceLock<Arc<Entry>>,
}

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// Whether `policy` spends leased credit rather than a local limiter: every budget beyond
/// one process is owned by an allocator, whatever its algorithm, and leased unless it is
/// decided per request. Concurrency limits are per process only (validation refuses them
/// at any other scope).
pub(crate) fn is_leased(policy: &Policy) -> bool {
    policy.scope != Scope::Process
        && policy.algorithm != Algorithm::Concurrency
        && policy.enforcement != leasehold_common::policy::Enforcement::Exact
}

impl CompiledPolicy {
    pub(crate) fn is_leased(&self) -> bool {
        matches!(self.enforcement, Enforcement::Leased)
    }

    /// Fresh state for one key at `now`. A leased key keeps the slot of `stale` (its
    /// previous state under an older version): the lease manager owns that lease and
    /// reconciles its version; a second slot would ask for a second lease.
    pub(crate) fn new_state(&self, stale: Option<&Entry>, now: Nanos) -> EntryState {
        match &self.enforcement {
            Enforcement::Leased => {
                let slot = stale
                    .and_then(|e| match &e.state {
                        EntryState::Leased { slot, .. } => Some(Arc::clone(slot)),
                        _ => None,
                    })
                    .unwrap_or_else(|| Arc::new(CreditSlot::new()));
                EntryState::Leased {
                    slot,
                    acquiring_since_ns: AtomicU64::new(super::table::NOT_ACQUIRING),
                    pacer: self.new_pacer(stale, now),
                }
            }
            Enforcement::Exact => EntryState::Exact,
            Enforcement::Local(spec) => EntryState::Local(SpinLock::new(spec.build(now))),
            // The counter is shared with the stale entry: requests admitted under the old
            // version release into it, and the new limit counts them while they run.
            Enforcement::Concurrency { max_in_flight } => EntryState::InFlight {
                count: stale
                    .and_then(|e| match &e.state {
                        EntryState::InFlight { count, .. } => Some(Arc::clone(count)),
                        _ => None,
                    })
                    .unwrap_or_default(),
                max: *max_in_flight,
            },
        }
    }

    /// State of the overflow key (kept outside the key table), following `stale`.
    pub(crate) fn new_overflow(&self, stale: Option<&Entry>, now: Nanos) -> Entry {
        let key = self.schema.overflow_key().into();
        let state = self.new_state(stale, now);
        Entry::new(key, 0, self.generation, state, now)
    }

    /// The overflow key's state, made on first use.
    pub(crate) fn overflow_entry(&self, now: Nanos) -> &Arc<Entry> {
        self.overflow
            .get_or_init(|| Arc::new(self.new_overflow(None, now)))
    }

    /// [`ns_to_earn`](Self::ns_to_earn) for a refused request of `units`, which mostly
    /// costs what every request of the policy does.
    #[inline(always)]
    pub(crate) fn retry_after_ns(&self, units: u64) -> u64 {
        if self.request_cost == Some(units) {
            return self.request_earn_ns;
        }
        self.ns_to_earn(units)
    }

    /// Time for the policy's rate to produce `units`; a retry hint for leased credit.
    #[inline(always)]
    pub(crate) fn ns_to_earn(&self, units: u64) -> u64 {
        // Matched by reference: `map_or` copied the rate out and stayed a call.
        match &self.rate {
            Some(rate) => rate.ns_until(units),
            None => 0,
        }
    }
}
