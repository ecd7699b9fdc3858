//! Every window of one key's admissions against `B + r·T`, from the instants the generator
//! recorded, in one pass.
//!
//! Admissions `i..=j` (in time order) break the bound when `j − i + 1 > B + r·(t_j − t_i)`.
//! Scaled by the rate's period `p` (r = u/p) that is
//! `(j+1)·p − u·t_j − (i·p − u·t_i) > B·p`, so keeping the smallest `i·p − u·t_i` seen so
//! far checks every window ending at `j` at once: n admissions, n·(n+1)/2 windows, O(n).

use leasehold_common::rate::Rate;
use serde::Serialize;

/// The outcome of checking one key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WindowCheck {
    /// Windows (pairs of first and last admission) covered.
    pub windows: u64,
    /// Admissions that end a window over the bound.
    pub violations: u64,
    /// The largest excess over the bound, in units.
    pub worst_excess: u64,
}

/// Checks admissions at `at_ns` (ascending, one unit each) against `burst + rate·T`.
pub fn check_key(at_ns: &[u64], rate: Rate, burst: u64) -> WindowCheck {
    let p = i128::from(rate.period_ns());
    let u = i128::from(rate.units());
    let limit = i128::from(burst) * p;
    let n = at_ns.len() as u64;
    let mut out = WindowCheck {
        windows: n * (n + 1) / 2,
        ..WindowCheck::default()
    };
    let mut min_start = i128::MAX;
    for (j, &t) in at_ns.iter().enumerate() {
        let t = i128::from(t);
        min_start = min_start.min(j as i128 * p - u * t);
        let worst = (j as i128 + 1) * p - u * t - min_start;
        if worst > limit {
            out.violations += 1;
            // Excess in units, rounded up: any fraction over the bound is a whole unit.
            let excess = ((worst - limit) + p - 1) / p;
            out.worst_excess = out.worst_excess.max(excess as u64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_burst_then_the_rate_is_within_the_bound() {
        let rate = Rate::per_second(10).unwrap();
        // 5 at once (the burst), then one every 100 ms for a second.
        let mut at: Vec<u64> = vec![0; 5];
        at.extend((1..=10).map(|k| k * 100 * MS));
        let c = check_key(&at, rate, 5);
        assert_eq!(c.violations, 0, "{c:?}");
        assert_eq!(c.windows, 15 * 16 / 2);
    }

    #[test]
    fn one_unit_over_in_any_window_is_found() {
        let rate = Rate::per_second(10).unwrap();
        let mut at: Vec<u64> = vec![0; 5];
        at.extend((1..=10).map(|k| k * 100 * MS));
        // One more at 500 ms: 11 units within 500 ms, where B + r·T allows 10.
        at.push(500 * MS);
        at.sort_unstable();
        let c = check_key(&at, rate, 5);
        assert!(c.violations > 0, "{c:?}");
        assert_eq!(c.worst_excess, 1);
    }
}
