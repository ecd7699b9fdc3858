//! Exact rates.
//!
//! A [`Rate`] is `units` per `period_ns`, kept as two integers. Refill carries the
//! sub-unit remainder as a numerator over `period_ns`, so stepping time one nanosecond at a
//! time yields exactly the same credit as one big step: nothing is lost and nothing minted.

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Sustained rate: `units` every `period_ns` nanoseconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rate {
    units: u64,
    period_ns: u64,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RateError {
    #[error("rate units must be positive")]
    ZeroUnits,
    #[error("rate period must be positive")]
    ZeroPeriod,
}

impl Rate {
    pub fn new(units: u64, period_ns: u64) -> Result<Rate, RateError> {
        if units == 0 {
            return Err(RateError::ZeroUnits);
        }
        if period_ns == 0 {
            return Err(RateError::ZeroPeriod);
        }
        Ok(Rate { units, period_ns })
    }

    pub fn per_second(units: u64) -> Result<Rate, RateError> {
        Rate::new(units, NANOS_PER_SEC)
    }

    pub fn units(&self) -> u64 {
        self.units
    }

    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Whole units produced by `elapsed_ns` on top of a carried remainder `frac`
    /// (a numerator over `period_ns`). Returns the whole units and the new remainder.
    #[inline]
    pub fn produce(&self, elapsed_ns: u64, frac: u64) -> (u64, u64) {
        let total = u128::from(frac) + u128::from(elapsed_ns) * u128::from(self.units);
        let (whole, frac) = div_rem_wide(total, self.period_ns);
        (u64::try_from(whole).unwrap_or(u64::MAX), frac)
    }

    /// Units produced over `elapsed_ns`, rounded down (no remainder carried).
    pub fn units_in(&self, elapsed_ns: u64) -> u64 {
        self.produce(elapsed_ns, 0).0
    }

    /// Smallest number of nanoseconds after which `missing` whole units exist, given a
    /// carried remainder `frac`.
    #[inline]
    pub fn ns_until(&self, missing: u64, frac: u64) -> u64 {
        if missing == 0 {
            return 0;
        }
        let need = u128::from(missing) * u128::from(self.period_ns);
        let (whole, rest) = div_rem_wide(need.saturating_sub(u128::from(frac)), self.units);
        u64::try_from(whole + u128::from(rest != 0)).unwrap_or(u64::MAX)
    }

    /// Nanoseconds of production one unit takes, rounded up (used by GCRA).
    pub fn ns_per_unit_ceil(&self) -> u64 {
        self.period_ns.div_ceil(self.units)
    }

    /// Thousandths of a unit per second, rounded down (the unit admin APIs use).
    pub fn milli_per_sec(&self) -> u64 {
        let milli =
            u128::from(self.units) * 1_000 * u128::from(NANOS_PER_SEC) / u128::from(self.period_ns);
        u64::try_from(milli).unwrap_or(u64::MAX)
    }

    /// Approximate units per second, for display and metrics only.
    pub fn per_second_f64(&self) -> f64 {
        self.units as f64 * NANOS_PER_SEC as f64 / self.period_ns as f64
    }
}

/// `n / d` and `n % d`, in 64 bits when `n` fits (for a rate, any step shorter than ~18 s
/// at a billion units a second): the 128-bit division is a library call that costs more
/// than the rest of a limiter's check.
#[inline]
pub fn div_rem_wide(n: u128, d: u64) -> (u128, u64) {
    match u64::try_from(n) {
        Ok(n) => (u128::from(n / d), n % d),
        Err(_) => (n / u128::from(d), (n % u128::from(d)) as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanosecond_steps_equal_one_big_step() {
        let r = Rate::per_second(1000).unwrap();
        let (mut whole, mut frac) = (0u64, 0u64);
        for _ in 0..3_000_000 {
            let (w, f) = r.produce(1, frac);
            whole += w;
            frac = f;
        }
        assert_eq!(whole, 3);
        assert_eq!(frac, 0);
        assert_eq!(r.produce(3_000_000, 0), (3, 0));
    }

    #[test]
    fn ns_until_is_tight() {
        let r = Rate::per_second(3).unwrap();
        let ns = r.ns_until(1, 0);
        assert_eq!(r.produce(ns, 0).0, 1);
        assert_eq!(r.produce(ns - 1, 0).0, 0);
    }

    #[test]
    fn milli_rate_is_exact() {
        assert_eq!(Rate::per_second(100).unwrap().milli_per_sec(), 100_000);
        assert_eq!(
            Rate::new(1, 2 * NANOS_PER_SEC).unwrap().milli_per_sec(),
            500
        );
    }

    /// The 64-bit paths answer exactly what the 128-bit arithmetic does, at the edges
    /// where the products stop fitting too.
    #[test]
    fn narrow_arithmetic_agrees_with_wide() {
        let big = [
            0,
            1,
            2,
            3,
            999,
            1 << 20,
            1 << 32,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ];
        let rates = [
            Rate::per_second(1).unwrap(),
            Rate::per_second(3).unwrap(),
            Rate::per_second(1_000_000_000).unwrap(),
            Rate::new(7, 3).unwrap(),
            Rate::new(u64::MAX, 1).unwrap(),
            Rate::new(1, u64::MAX).unwrap(),
        ];
        for r in rates {
            let (u, p) = (u128::from(r.units), u128::from(r.period_ns));
            for &a in &big {
                for &frac in &[0, 1, r.period_ns - 1] {
                    let total = u128::from(frac) + u128::from(a) * u;
                    let whole = u64::try_from(total / p).unwrap_or(u64::MAX);
                    assert_eq!(
                        r.produce(a, frac),
                        (whole, (total % p) as u64),
                        "{r:?} {a} {frac}"
                    );
                    if a > 0 {
                        let need = (u128::from(a) * p).saturating_sub(u128::from(frac));
                        let ns = u64::try_from(need.div_ceil(u)).unwrap_or(u64::MAX);
                        assert_eq!(r.ns_until(a, frac), ns, "{r:?} {a} {frac}");
                    }
                }
            }
        }
    }

    #[test]
    fn wide_division_agrees_with_u128() {
        let ns = [0, 1, 7, u128::from(u64::MAX) - 1, u128::from(u64::MAX)];
        let ns = ns.into_iter().chain([1 << 64, (1 << 64) + 5, u128::MAX]);
        for n in ns {
            for d in [1, 3, 1_000_000_000, u64::MAX] {
                let want = (n / u128::from(d), (n % u128::from(d)) as u64);
                assert_eq!(div_rem_wide(n, d), want, "{n} / {d}");
            }
        }
    }

    #[test]
    fn zero_is_refused() {
        assert_eq!(Rate::new(0, 1), Err(RateError::ZeroUnits));
        assert_eq!(Rate::new(1, 0), Err(RateError::ZeroPeriod));
    }
}
