//! How long a policy's rate takes to produce some units, worked out on every leased
//! admission (the reset time it reports) and refusal (the retry hint).

use leasehold_common::rate::Rate;
use strength_reduce::StrengthReducedU64;

/// A rate with its units prepared as a divisor: dividing by them is then two multiplies
/// and a shift, where a hardware division was the slowest instruction of a leased check.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EarnRate {
    rate: Rate,
    units: StrengthReducedU64,
}

impl EarnRate {
    pub(crate) fn new(rate: Rate) -> Self {
        EarnRate {
            rate,
            // A rate's units are never zero.
            units: StrengthReducedU64::new(rate.units()),
        }
    }

    /// Nanoseconds until `units` whole units are produced: exactly
    /// [`Rate::ns_until`]`(units, 0)`.
    #[inline(always)]
    pub(crate) fn ns_until(&self, units: u64) -> u64 {
        if units == 0 {
            return 0;
        }
        match units.checked_mul(self.rate.period_ns()) {
            Some(need) => {
                let (whole, rest) = StrengthReducedU64::div_rem(need, self.units);
                whole + u64::from(rest != 0)
            }
            None => self.rate.ns_until(units, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_rate_at_the_edges() {
        let rates = [
            Rate::per_second(1).unwrap(),
            Rate::per_second(3).unwrap(),
            Rate::per_second(1_000_000_000).unwrap(),
            Rate::new(7, 3).unwrap(),
            Rate::new(1 << 40, 1).unwrap(),
            Rate::new(u64::MAX, 1).unwrap(),
            Rate::new(1, u64::MAX).unwrap(),
            Rate::new(u64::MAX - 2, u64::MAX).unwrap(),
        ];
        let units = [0, 1, 2, 3, 999, 1 << 20, 1 << 33, u64::MAX / 3, u64::MAX];
        for rate in rates {
            let earn = EarnRate::new(rate);
            for n in units {
                assert_eq!(earn.ns_until(n), rate.ns_until(n, 0), "{rate:?} {n}");
            }
        }
    }
}
