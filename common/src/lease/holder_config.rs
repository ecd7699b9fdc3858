//! Holder-side lease parameters and the conservative deadline they imply.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::demand::DemandMeter;
use crate::time::Nanos;

/// Parts per million in one.
pub const PPM: u64 = 1_000_000;
const NANOS_PER_MS: u64 = 1_000_000;

/// Largest accepted `max_drift_ppm` (10 %): a clock worse than that is broken, not drifting.
pub const MAX_DRIFT_PPM_LIMIT: u32 = 100_000;
/// Largest accepted `safety_margin_ms`.
pub const SAFETY_MARGIN_MS_LIMIT: u64 = 60_000;
/// Largest accepted `refresh_horizon_ms`.
pub const REFRESH_HORIZON_MS_LIMIT: u64 = 3_600_000;
/// Largest accepted `demand_slot_ms`.
pub const DEMAND_SLOT_MS_LIMIT: u64 = 60_000;
/// Largest accepted `demand_slots`.
pub const DEMAND_SLOTS_LIMIT: usize = 64;
/// Largest accepted `reports_tracked_max`.
pub const REPORTS_TRACKED_LIMIT: usize = 256;

/// How a holder spends, measures and renews its leases.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HolderConfig {
    /// Declared bound on how fast or slow the holder's clock may run against real time.
    pub max_drift_ppm: u32,
    /// Taken off every lease's validity on top of the drift allowance, to cover the time
    /// between checking the deadline and the admitted work happening. Zero is allowed: the
    /// drift allowance alone already keeps the holder's deadline within the grantor's.
    pub safety_margin_ms: u64,
    /// Ask for more credit when what is left would not last this long at measured demand,
    /// or when the lease expires within it.
    pub refresh_horizon_ms: u64,
    /// Smallest additional credit asked for in one refresh.
    pub min_request_credit: u64,
    /// Largest additional credit asked for in one refresh.
    pub max_request_credit: u64,
    /// Width of one demand-meter slot.
    pub demand_slot_ms: u64,
    /// Number of slots the demand meter keeps; the measured window is their total width.
    pub demand_slots: usize,
    /// Most sent reports remembered to match a renewal to the returns it already reflects.
    pub reports_tracked_max: usize,
}

impl Default for HolderConfig {
    fn default() -> Self {
        HolderConfig {
            max_drift_ppm: 1_000,
            safety_margin_ms: 100,
            refresh_horizon_ms: 2_000,
            min_request_credit: 1,
            max_request_credit: 1_000_000,
            demand_slot_ms: 500,
            demand_slots: 8,
            reports_tracked_max: 16,
        }
    }
}

/// A [`HolderConfig`] field outside its accepted range.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("holder config: {field} = {value} is invalid: {reason}")]
pub struct HolderConfigError {
    pub field: &'static str,
    pub value: u64,
    pub reason: &'static str,
}

fn check(
    ok: bool,
    field: &'static str,
    value: u64,
    reason: &'static str,
) -> Result<(), HolderConfigError> {
    if ok {
        Ok(())
    } else {
        Err(HolderConfigError {
            field,
            value,
            reason,
        })
    }
}

impl HolderConfig {
    /// Checks every field against its range.
    pub fn validate(&self) -> Result<(), HolderConfigError> {
        let drift = self.max_drift_ppm;
        check(
            drift <= MAX_DRIFT_PPM_LIMIT,
            "max_drift_ppm",
            drift.into(),
            "above 100000 (10%)",
        )?;
        let margin = self.safety_margin_ms;
        check(
            margin <= SAFETY_MARGIN_MS_LIMIT,
            "safety_margin_ms",
            margin,
            "above 60000",
        )?;
        let horizon = self.refresh_horizon_ms;
        check(
            horizon > 0,
            "refresh_horizon_ms",
            horizon,
            "must be positive",
        )?;
        check(
            horizon <= REFRESH_HORIZON_MS_LIMIT,
            "refresh_horizon_ms",
            horizon,
            "above 3600000",
        )?;
        let min = self.min_request_credit;
        check(min > 0, "min_request_credit", min, "must be positive")?;
        let max = self.max_request_credit;
        check(
            max >= min,
            "max_request_credit",
            max,
            "below min_request_credit",
        )?;
        let slot = self.demand_slot_ms;
        check(slot > 0, "demand_slot_ms", slot, "must be positive")?;
        check(
            slot <= DEMAND_SLOT_MS_LIMIT,
            "demand_slot_ms",
            slot,
            "above 60000",
        )?;
        let slots = self.demand_slots as u64;
        check(slots > 0, "demand_slots", slots, "must be positive")?;
        check(
            slots <= DEMAND_SLOTS_LIMIT as u64,
            "demand_slots",
            slots,
            "above 64",
        )?;
        let reports = self.reports_tracked_max as u64;
        check(
            reports > 0,
            "reports_tracked_max",
            reports,
            "must be positive",
        )?;
        check(
            reports <= REPORTS_TRACKED_LIMIT as u64,
            "reports_tracked_max",
            reports,
            "above 256",
        )
    }

    /// How long, on the holder's clock, a lease version with `ttl_ms` may be spent:
    /// `ttl · (1 − max_drift_ppm/10⁶) − safety_margin`, rounded down, never negative.
    ///
    /// Why this suffices: the holder starts counting at its send time, which is no later than
    /// the grant, and a clock running at least `1 − drift` times real speed reaches this
    /// many nanoseconds no later than `ttl` of real time after the send.
    pub fn valid_for_ns(&self, ttl_ms: u64) -> u64 {
        let ttl_ns = u128::from(ttl_ms) * u128::from(NANOS_PER_MS);
        let kept = PPM.saturating_sub(u64::from(self.max_drift_ppm));
        let shortened = ttl_ns * u128::from(kept) / u128::from(PPM);
        let margin_ns = u128::from(self.safety_margin_ms) * u128::from(NANOS_PER_MS);
        u64::try_from(shortened.saturating_sub(margin_ns)).unwrap_or(u64::MAX)
    }

    /// The holder-side deadline of a lease version sent for at `sent_at` with `ttl_ms`.
    pub fn deadline(&self, sent_at: Nanos, ttl_ms: u64) -> Nanos {
        sent_at.saturating_add_ns(self.valid_for_ns(ttl_ms))
    }

    /// `refresh_horizon_ms` in nanoseconds.
    pub fn refresh_horizon_ns(&self) -> u64 {
        self.refresh_horizon_ms.saturating_mul(NANOS_PER_MS)
    }

    /// An empty demand meter sized by this config, starting at `now`.
    pub fn demand_meter(&self, now: Nanos) -> Result<DemandMeter, HolderConfigError> {
        self.validate()?;
        DemandMeter::new(self.demand_slot_ms, self.demand_slots, now)
    }
}

/// How long a holder waits before asking again after a grantor denied credit and named
/// when to come back (`named_ms`, 0 when it named nothing). A named time is kept as it is:
/// a window's credit returns at its reset, often a few milliseconds after the denial, and
/// waiting `retry_ms` instead would leave the holder without credit for that long at the
/// start of every window. The caller's own tick bounds how often it can ask.
pub fn wait_after_denial_ms(named_ms: u64, retry_ms: u64) -> u64 {
    if named_ms > 0 {
        named_ms
    } else {
        retry_ms
    }
}
