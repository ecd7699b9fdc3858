//! Checking admissions against the budget bound `B + r·T` over every window.

use leasehold_common::rate::Rate;
use serde::Serialize;
use std::ops::Range;

/// Windows of a per-step admission series that exceed `burst + r·T`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BoundCheck {
    /// Windows checked (every pair of steps).
    pub windows: u64,
    /// Windows whose admissions exceeded the bound.
    pub violations: u64,
    /// The worst excess seen, in units (zero when none).
    pub worst_excess: u64,
    /// Step index where the worst window starts.
    pub worst_start: usize,
}

/// Checks every window `[i, j]` of `admitted` (units admitted at step `k`, steps `step_ns`
/// apart, all at the step's instant) against `burst + ⌊r·(j−i)·step⌋`.
pub fn check_windows(admitted: &[u64], step_ns: u64, rate: Rate, burst: u64) -> BoundCheck {
    check_span(admitted, 0..admitted.len(), step_ns, rate, burst)
}

/// As [`check_windows`], for the windows that lie wholly inside `span` (step indices).
pub fn check_span(
    admitted: &[u64],
    span: Range<usize>,
    step_ns: u64,
    rate: Rate,
    burst: u64,
) -> BoundCheck {
    let end = span.end.min(admitted.len());
    let mut out = BoundCheck::default();
    for i in span.start..end {
        let mut sum = 0u64;
        for (k, units) in admitted[i..end].iter().enumerate() {
            sum += units;
            let bound = burst + rate.units_in(k as u64 * step_ns);
            out.windows += 1;
            if sum > bound {
                out.violations += 1;
                if sum - bound > out.worst_excess {
                    out.worst_excess = sum - bound;
                    out.worst_start = i;
                }
            }
        }
    }
    out
}

/// The most units admitted in any window of `window_steps` consecutive steps.
pub fn peak_window(admitted: &[u64], window_steps: usize) -> u64 {
    let w = window_steps.max(1);
    let mut sum: u64 = admitted.iter().take(w).sum();
    let mut peak = sum;
    for i in w..admitted.len() {
        sum = sum + admitted[i] - admitted[i - w];
        peak = peak.max(sum);
    }
    peak
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

    #[test]
    fn a_span_ignores_windows_outside_it() {
        let rate = Rate::per_second(10).unwrap();
        let series = [50, 0, 1, 1];
        assert_eq!(check_windows(&series, 100_000_000, rate, 5).violations, 4);
        assert_eq!(
            check_span(&series, 1..4, 100_000_000, rate, 5).violations,
            0
        );
    }

    #[test]
    fn peak_window_slides() {
        assert_eq!(peak_window(&[1, 5, 1, 4, 4], 2), 8);
        assert_eq!(peak_window(&[3], 5), 3);
    }
}
