//! Checking admissions against the budget bound `B + r·T` over every window.

use leasehold_common::rate::Rate;

/// Windows of a per-step admission series that exceed `burst + r·T`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundCheck {
    /// Windows checked (every pair of steps).
    pub windows: u64,
    /// Windows whose admissions exceeded the bound.
    pub violations: u64,
    /// The worst excess seen, in units (zero when none).
    pub worst_excess: u64,
}

/// Checks every window `[i, j]` of `admitted` (units admitted at step `k`, steps `step_ns`
/// apart, all at the step's instant) against `burst + ⌊r·(j−i)·step⌋`.
pub fn check_windows(admitted: &[u64], step_ns: u64, rate: Rate, burst: u64) -> BoundCheck {
    let mut out = BoundCheck::default();
    for i in 0..admitted.len() {
        let mut sum = 0u64;
        for (k, units) in admitted[i..].iter().enumerate() {
            sum += units;
            let bound = burst + rate.units_in(k as u64 * step_ns);
            out.windows += 1;
            if sum > bound {
                out.violations += 1;
                out.worst_excess = out.worst_excess.max(sum - bound);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_a_window_over_the_bound() {
        let rate = Rate::per_second(10).unwrap();
        let ok = check_windows(&[5, 1, 1], 100_000_000, rate, 5);
        assert_eq!(ok.violations, 0);
        let bad = check_windows(&[5, 2], 100_000_000, rate, 5);
        assert_eq!((bad.violations, bad.worst_excess), (1, 1));
    }
}
