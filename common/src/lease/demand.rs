//! Measured demand: how many units per second a holder spends (or is asked to spend).
//!
//! A fixed ring of per-slot counts covers a sliding window; memory is set at construction
//! and never grows. All arithmetic is integer: the rate is kept in milli-units per second
//! so a slow key (a few units a minute) is not rounded to zero.
//!
//! Feed the meter with the units *offered* (admitted and refused alike): a holder whose
//! lease ran dry admits nothing, and a meter of admitted units would then read no demand
//! and never ask for more.

use serde::{Deserialize, Serialize};

use super::holder_config::{HolderConfigError, DEMAND_SLOTS_LIMIT, DEMAND_SLOT_MS_LIMIT};
use crate::time::Nanos;

const NANOS_PER_SEC: u128 = 1_000_000_000;
const MILLI: u128 = 1_000;

/// A rate in milli-units per second.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Demand(pub u64);

impl Demand {
    /// No demand.
    pub const ZERO: Demand = Demand(0);

    /// `units` whole units per second.
    pub const fn from_units_per_s(units: u64) -> Demand {
        Demand(units.saturating_mul(1_000))
    }

    /// The rate in milli-units per second.
    pub const fn milli_per_s(self) -> u64 {
        self.0
    }

    /// Whole units this rate produces over `ms`, rounded up (so sizing never falls short).
    pub fn units_over_ms_ceil(self, ms: u64) -> u64 {
        let milli_units_ms = u128::from(self.0) * u128::from(ms);
        u64::try_from(milli_units_ms.div_ceil(MILLI * MILLI)).unwrap_or(u64::MAX)
    }

    /// Whether `units` would run out in less than `ms` at this rate (exact comparison).
    pub fn outruns(self, units: u64, ms: u64) -> bool {
        u128::from(units) * MILLI * MILLI < u128::from(self.0) * u128::from(ms)
    }
}

/// Spend rate over a sliding window of `slots × slot_ns`.
#[derive(Clone, Debug)]
pub struct DemandMeter {
    slot_ns: u64,
    /// `counts[i % len]` holds the units recorded in absolute slot `i`, for the newest
    /// `len` slots up to `current_slot`.
    counts: Box<[u64]>,
    current_slot: u64,
    started: Nanos,
    /// Newest time seen; earlier readings count as this time (no elapsed time).
    last: Nanos,
}

impl DemandMeter {
    /// A meter with `slots` slots of `slot_ms` each, starting empty at `now`.
    pub fn new(slot_ms: u64, slots: usize, now: Nanos) -> Result<DemandMeter, HolderConfigError> {
        if slot_ms == 0 || slot_ms > DEMAND_SLOT_MS_LIMIT {
            return Err(HolderConfigError {
                field: "demand_slot_ms",
                value: slot_ms,
                reason: "must be in 1..=60000",
            });
        }
        if slots == 0 || slots > DEMAND_SLOTS_LIMIT {
            return Err(HolderConfigError {
                field: "demand_slots",
                value: slots as u64,
                reason: "must be in 1..=64",
            });
        }
        let slot_ns = slot_ms * 1_000_000;
        Ok(DemandMeter {
            slot_ns,
            counts: vec![0; slots].into_boxed_slice(),
            current_slot: now.0 / slot_ns,
            started: now,
            last: now,
        })
    }

    /// Width of the measured window, in nanoseconds.
    pub fn window_ns(&self) -> u64 {
        self.slot_ns * self.counts.len() as u64
    }

    /// Counts `units` at `now`. Allocation-free.
    pub fn record(&mut self, units: u64, now: Nanos) {
        let now = self.now(now);
        self.advance(now);
        let idx = self.index(self.current_slot);
        self.counts[idx] = self.counts[idx].saturating_add(units);
    }

    /// The measured rate at `now`: units counted within the window, divided by the part of
    /// the window the meter has existed for (at least one slot, so a single early spend is
    /// not read as an enormous rate).
    pub fn rate(&self, now: Nanos) -> Demand {
        let now = self.now(now);
        let slot = now.0 / self.slot_ns;
        let len = self.counts.len() as u64;
        let oldest = (slot + 1).saturating_sub(len);
        let first = oldest.max((self.current_slot + 1).saturating_sub(len));
        let mut units: u128 = 0;
        for s in first..=self.current_slot {
            units += u128::from(self.counts[self.index(s)]);
        }
        let window_start = (oldest * self.slot_ns).max(self.started.0);
        let covered_ns = now.0.saturating_sub(window_start).max(self.slot_ns);
        let milli = units * MILLI * NANOS_PER_SEC / u128::from(covered_ns);
        Demand(u64::try_from(milli).unwrap_or(u64::MAX))
    }

    fn now(&self, now: Nanos) -> Nanos {
        now.max(self.last)
    }

    fn index(&self, slot: u64) -> usize {
        (slot % self.counts.len() as u64) as usize
    }

    /// Moves the ring forward to `now`, clearing the slots that fell out of the window.
    fn advance(&mut self, now: Nanos) {
        self.last = now;
        let slot = now.0 / self.slot_ns;
        let steps = slot.saturating_sub(self.current_slot);
        for step in 1..=steps.min(self.counts.len() as u64) {
            let idx = self.index(self.current_slot + step);
            self.counts[idx] = 0;
        }
        self.current_slot = self.current_slot.max(slot);
    }
}
