//! The Generic Cell Rate Algorithm: rate `r`, burst tolerance `B`, weighted cost.
//!
//! GCRA keeps one instant, the theoretical arrival time (TAT): the time at which the
//! schedule of everything admitted so far would have drained at rate `r`. A cost `c` is
//! admitted at `now` when `max(TAT, now) + c·I ≤ now + B·I`, where `I = period/units` is
//! the emission interval of one unit.
//!
//! `I` is rarely a whole number of nanoseconds, and rounding it either way is wrong: down
//! mints credit, up under-serves the rate. So the TAT is kept exactly, in *scaled*
//! nanoseconds (`ns × units`), where one unit's emission interval is exactly `period_ns`
//! and every comparison is an integer comparison.
//!
//! # Bound
//!
//! GCRA is a continuous token bucket in disguise: the credit at `t` is
//! `B − max(0, TAT − t)/I`, never above `B`, growing at exactly `r` and spent by admissions.
//! So the units admitted at times in any closed interval `[a, b]`, `T = b − a`, number at
//! most `B + ⌊r·T⌋` (the same bound as [`TokenBucket`](super::TokenBucket)), with no
//! rounding slack.
//!
//! # Time
//!
//! A `now` earlier than the latest time seen is treated as that latest time (P3): a clock
//! step backwards neither refills nor shortens a wait.

use super::{Decision, Limiter};
use crate::rate::{div_rem_wide, Rate};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why a GCRA configuration was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum GcraError {
    #[error("gcra burst must be positive (burst = 0)")]
    ZeroBurst,
    #[error(
        "gcra burst {burst} takes longer than u64::MAX ns to earn at {units} units per \
         {period_ns} ns; lower the burst or raise the rate"
    )]
    BurstWindowTooLong {
        burst: u64,
        units: u64,
        period_ns: u64,
    },
}

/// GCRA limiter state: a few integers, exact arithmetic, no timestamp log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gcra {
    rate: Rate,
    burst: u64,
    /// Whole nanoseconds of the TAT.
    tat_ns: u64,
    /// Sub-nanosecond part of the TAT, a numerator over `rate.units()`.
    tat_frac: u64,
    /// Latest time seen; earlier readings are treated as this.
    last: Nanos,
    /// Time of the latest admission and the units admitted at exactly that time and not
    /// refunded: the only charges a refund can return exactly (see [`Limiter::refund`]).
    last_admit: Nanos,
    last_admit_units: u64,
}

impl Gcra {
    /// A limiter whose whole burst is available at `now`.
    pub fn full(rate: Rate, burst: u64, now: Nanos) -> Result<Gcra, GcraError> {
        Self::validate(rate, burst)?;
        Ok(Gcra {
            rate,
            burst,
            tat_ns: now.0,
            tat_frac: 0,
            last: now,
            last_admit: now,
            last_admit_units: 0,
        })
    }

    /// A limiter with nothing available at `now` (a conservative start after a restart).
    pub fn empty(rate: Rate, burst: u64, now: Nanos) -> Result<Gcra, GcraError> {
        let mut g = Self::full(rate, burst, now)?;
        let tat = g.scaled(now).saturating_add(g.burst_scaled());
        if !g.store_tat(tat) {
            // The drained schedule runs past the end of the timeline: nothing is ever
            // available, which is the conservative reading.
            g.tat_ns = u64::MAX;
        }
        Ok(g)
    }

    /// A limiter whose theoretical arrival time is `tat_ns` plus `tat_frac` over the rate's
    /// units at `now`: state carried across a restart. The TAT is clamped to that of a
    /// drained limiter (`now + B·I`), never later, and to `now`, never earlier (a full one).
    pub fn with_tat(
        rate: Rate,
        burst: u64,
        tat_ns: u64,
        tat_frac: u64,
        now: Nanos,
    ) -> Result<Gcra, GcraError> {
        let mut g = Self::full(rate, burst, now)?;
        let tat = (u128::from(tat_ns) * g.units())
            .saturating_add(u128::from(tat_frac.min(rate.units() - 1)))
            .min(g.scaled(now).saturating_add(g.burst_scaled()))
            .max(g.scaled(now));
        if !g.store_tat(tat) {
            g.tat_ns = u64::MAX;
        }
        Ok(g)
    }

    fn validate(rate: Rate, burst: u64) -> Result<(), GcraError> {
        if burst == 0 {
            return Err(GcraError::ZeroBurst);
        }
        // The burst window B·I must be a representable duration, so that the TAT of a
        // drained limiter (at most `now + B·I`) stays on the u64 timeline.
        if rate.ns_until(burst, 0) == u64::MAX {
            return Err(GcraError::BurstWindowTooLong {
                burst,
                units: rate.units(),
                period_ns: rate.period_ns(),
            });
        }
        Ok(())
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Latest time seen.
    pub fn last(&self) -> Nanos {
        self.last
    }

    /// The theoretical arrival time, rounded up to whole nanoseconds.
    #[inline]
    pub fn tat(&self) -> Nanos {
        Nanos(self.tat_ns.saturating_add(u64::from(self.tat_frac > 0)))
    }

    /// The exact theoretical arrival time: whole nanoseconds and a remainder over the
    /// rate's units.
    pub fn tat_exact(&self) -> (u64, u64) {
        (self.tat_ns, self.tat_frac)
    }

    /// Whole units that could be admitted at `now` (clamped to the latest time seen),
    /// without changing anything.
    pub fn available(&self, now: Nanos) -> u64 {
        let now = now.max(self.last);
        self.credit_units(self.scaled(now), self.tat_scaled())
    }

    #[inline]
    fn units(&self) -> u128 {
        u128::from(self.rate.units())
    }

    #[inline]
    fn period(&self) -> u128 {
        u128::from(self.rate.period_ns())
    }

    /// `t` in scaled nanoseconds (`ns × units`).
    #[inline]
    fn scaled(&self, t: Nanos) -> u128 {
        u128::from(t.0) * self.units()
    }

    #[inline]
    fn tat_scaled(&self) -> u128 {
        u128::from(self.tat_ns) * self.units() + u128::from(self.tat_frac)
    }

    /// `B·I` in scaled nanoseconds.
    #[inline]
    fn burst_scaled(&self) -> u128 {
        u128::from(self.burst) * self.period()
    }

    /// Stores a scaled TAT; returns `false` (storing nothing) if its whole nanoseconds do
    /// not fit the u64 timeline.
    #[inline]
    fn store_tat(&mut self, tat: u128) -> bool {
        let (ns, frac) = div_rem_wide(tat, self.rate.units());
        let Ok(ns) = u64::try_from(ns) else {
            return false;
        };
        self.tat_ns = ns;
        self.tat_frac = frac;
        true
    }

    /// Whole units of credit at scaled time `now_s` given a scaled TAT.
    #[inline]
    fn credit_units(&self, now_s: u128, tat: u128) -> u64 {
        let debt = tat.saturating_sub(now_s);
        let credit = self.burst_scaled().saturating_sub(debt);
        let (units, _) = div_rem_wide(credit, self.rate.period_ns());
        u64::try_from(units).unwrap_or(u64::MAX)
    }

    /// Smallest wait after `now_s` at which `cost` (≤ burst) fits, given the current TAT.
    fn wait_ns(&self, now_s: u128, cost: u64) -> u64 {
        let cost_s = u128::from(cost) * self.period();
        // Admissible once `now' ≥ TAT + c·I − B·I`; `now'` is whole nanoseconds, so round up.
        let allow_at =
            (self.tat_scaled().saturating_add(cost_s)).saturating_sub(self.burst_scaled());
        let wait_s = allow_at.saturating_sub(now_s);
        let wait = wait_s.div_ceil(self.units());
        u64::try_from(wait).unwrap_or(u64::MAX)
    }
}

impl Limiter for Gcra {
    #[inline]
    fn try_take(&mut self, cost: u64, now: Nanos) -> Decision {
        let now = now.max(self.last);
        self.last = now;
        let now_s = self.scaled(now);
        let tat = self.tat_scaled();
        if cost > self.burst {
            return Decision::Deny {
                remaining: self.credit_units(now_s, tat),
                retry_after_ns: u64::MAX,
            };
        }
        // Saturation only happens past the end of the u64 timeline, where `store_tat`
        // refuses the TAT and the cost is denied.
        let new_tat = tat
            .max(now_s)
            .saturating_add(u128::from(cost) * self.period());
        // `new_tat ≥ now_s`, so this difference is the debt after the charge.
        if new_tat - now_s <= self.burst_scaled() && self.store_tat(new_tat) {
            if now == self.last_admit {
                self.last_admit_units = self.last_admit_units.saturating_add(cost);
            } else {
                self.last_admit = now;
                self.last_admit_units = cost;
            }
            return Decision::Admit {
                remaining: self.credit_units(now_s, new_tat),
            };
        }
        Decision::Deny {
            remaining: self.credit_units(now_s, tat),
            retry_after_ns: self.wait_ns(now_s, cost),
        }
    }

    /// Returns units charged at the time of the latest admission (the rollback of a
    /// multi-dimensional admission, which happens right after the charge). Units charged
    /// earlier than that are not returned: a later admission may already have relied on
    /// the time they occupied, so giving them back could exceed the bound. Never returns
    /// more than was admitted at that time.
    fn refund(&mut self, cost: u64, charged_at: Nanos) {
        if charged_at != self.last_admit {
            return;
        }
        let units = cost.min(self.last_admit_units);
        self.last_admit_units -= units;
        // Every charge at the latest admission time sits on top of `max(TAT_before, t)`,
        // so removing `units` of them lowers the TAT by exactly `units·I`.
        let tat = self.tat_scaled() - u128::from(units) * self.period();
        self.store_tat(tat);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(units: u64, period_ns: u64) -> Rate {
        Rate::new(units, period_ns).unwrap()
    }

    #[test]
    fn with_tat_resumes_the_schedule_within_bounds() {
        let r = rate(3, 1_000_000_000);
        let mut g = Gcra::full(r, 2, Nanos(0)).unwrap();
        assert!(g.try_take(1, Nanos(0)).is_admit());
        let (ns, frac) = g.tat_exact();
        assert_eq!(
            (ns, frac),
            (333_333_333, 1),
            "one interval of a third of a second"
        );
        let mut resumed = Gcra::with_tat(r, 2, ns, frac, Nanos(0)).unwrap();
        assert_eq!(resumed.tat_exact(), g.tat_exact());
        assert_eq!(
            resumed.try_take(2, Nanos(0)),
            g.clone().try_take(2, Nanos(0))
        );
        let drained = Gcra::with_tat(r, 2, u64::MAX, 0, Nanos(5)).unwrap();
        assert_eq!(
            drained,
            Gcra::empty(r, 2, Nanos(5)).unwrap(),
            "at most drained"
        );
        let past = Gcra::with_tat(r, 2, 1, 0, Nanos(5)).unwrap();
        assert_eq!(past, Gcra::full(r, 2, Nanos(5)).unwrap(), "at least full");
    }

    #[test]
    fn admits_burst_then_one_per_interval() {
        let mut g = Gcra::full(rate(10, 1_000_000_000), 5, Nanos(0)).unwrap();
        for left in (0..5).rev() {
            assert_eq!(g.try_take(1, Nanos(0)), Decision::Admit { remaining: left });
        }
        assert_eq!(
            g.try_take(1, Nanos(0)),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 100_000_000
            }
        );
        assert!(!g.try_take(1, Nanos(99_999_999)).is_admit());
        assert!(g.try_take(1, Nanos(100_000_000)).is_admit());
    }

    #[test]
    fn retry_after_is_exact_with_fractional_interval() {
        // 3 units per 1 s: I = 333_333_333.33… ns.
        let mut g = Gcra::full(rate(3, 1_000_000_000), 2, Nanos(0)).unwrap();
        assert!(g.try_take(2, Nanos(0)).is_admit());
        let Decision::Deny { retry_after_ns, .. } = g.try_take(2, Nanos(0)) else {
            panic!("second burst must be denied");
        };
        // Two units take 666_666_666.67 ns to earn: the first whole ns is 666_666_667.
        assert_eq!(retry_after_ns, 666_666_667);
        let mut early = g.clone();
        assert!(!early.try_take(2, Nanos(retry_after_ns - 1)).is_admit());
        assert!(g.try_take(2, Nanos(retry_after_ns)).is_admit());
    }

    #[test]
    fn exact_rate_over_many_fractional_intervals() {
        // Taking one unit at a time at its earliest moment (never letting the limiter
        // fill up, which would drop credit) yields exactly `units` per period: no drift
        // from rounding the interval either way.
        let mut g = Gcra::empty(rate(7, 1_000_000_007), 2, Nanos(0)).unwrap();
        let mut now = Nanos(0);
        let mut admitted = 0u64;
        while now.0 <= 3 * 1_000_000_007 {
            match g.try_take(1, now) {
                Decision::Admit { .. } => admitted += 1,
                Decision::Deny { retry_after_ns, .. } => {
                    now = now.saturating_add_ns(retry_after_ns)
                }
            }
        }
        assert_eq!(admitted, 21);

        let g = Gcra::empty(rate(7, 1_000_000_007), 21, Nanos(0)).unwrap();
        assert_eq!(g.available(Nanos(3_000_000_020)), 20);
        assert_eq!(g.available(Nanos(3_000_000_021)), 21);
    }

    #[test]
    fn weighted_cost_and_above_burst() {
        let mut g = Gcra::full(rate(100, 1_000_000_000), 10, Nanos(0)).unwrap();
        assert_eq!(g.try_take(7, Nanos(0)), Decision::Admit { remaining: 3 });
        assert_eq!(
            g.try_take(5, Nanos(0)),
            Decision::Deny {
                remaining: 3,
                retry_after_ns: 20_000_000
            }
        );
        assert_eq!(
            g.try_take(11, Nanos::from_secs(100)),
            Decision::Deny {
                remaining: 10,
                retry_after_ns: u64::MAX
            }
        );
    }

    #[test]
    fn rollback_neither_refills_nor_shortens_the_wait() {
        let mut g = Gcra::full(rate(1, 1_000_000_000), 1, Nanos::from_secs(10)).unwrap();
        assert!(g.try_take(1, Nanos::from_secs(10)).is_admit());
        assert_eq!(
            g.try_take(1, Nanos::from_secs(3)),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 1_000_000_000
            }
        );
        assert!(g.try_take(1, Nanos::from_secs(11)).is_admit());
    }

    #[test]
    fn refund_returns_only_the_latest_charge() {
        let mut g = Gcra::full(rate(10, 1_000_000_000), 4, Nanos(0)).unwrap();
        assert!(g.try_take(3, Nanos(0)).is_admit());
        g.refund(2, Nanos(0));
        assert_eq!(g.available(Nanos(0)), 3);
        // Refunding more than was charged at that time returns only what was charged.
        g.refund(50, Nanos(0));
        assert_eq!(g.available(Nanos(0)), 4);
        assert_eq!(g.tat(), Nanos(0));

        // A charge that later admissions already relied on is not returned.
        assert!(g.try_take(4, Nanos(0)).is_admit());
        assert!(g.try_take(1, Nanos(500_000_000)).is_admit());
        let before = g.clone();
        g.refund(4, Nanos(0));
        assert_eq!(g, before);
    }

    #[test]
    fn refused_configurations() {
        assert_eq!(
            Gcra::full(rate(1, 1), 0, Nanos(0)),
            Err(GcraError::ZeroBurst)
        );
        let err = Gcra::full(rate(1, u64::MAX), 2, Nanos(0)).unwrap_err();
        assert!(err.to_string().contains("burst 2"), "{err}");
    }
}
