//! The admission log of a networked run and the budget bound (P1) over it.
//!
//! Admissions happen at arbitrary instants of simulated time, not on a fixed step grid, so
//! the bound is checked exactly: for every pair of instants `a ≤ b` with admissions, the
//! units admitted in `[a, b]` must not exceed `B + ⌊r·(b − a)⌋`. Windows that start or end
//! between admissions admit no more and allow no less, so these are all the windows.

use crate::bound::BoundCheck;
use leasehold_common::rate::Rate;
use serde::Serialize;

/// One admitted request (one unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Admission {
    /// Simulated time since the start of the run, in nanoseconds.
    pub at_ns: u64,
    /// Which agent admitted it.
    pub agent: u32,
}

/// What the agents of a run offered and admitted, shared by their hosts.
#[derive(Clone, Debug, Default)]
pub struct TrafficLog {
    /// Admissions charged against leased credit.
    pub admissions: Vec<Admission>,
    /// Admissions the policy's failure behaviour let through uncharged (`fail_open`,
    /// `restricted`): counted apart, never part of the bound's check.
    pub uncharged: Vec<Admission>,
    /// Requests offered, admitted or not.
    pub offered: u64,
    /// Requests an attacker sprayed over fresh tenants (not in `offered` nor `admissions`).
    pub spray: super::spray::SprayLog,
}

/// Checks every window between two admission instants against `burst + r·T`. The result
/// counts windows as pairs of instants; `worst_start` is the index of the earlier instant
/// in time order.
pub fn check_admissions(log: &[Admission], rate: Rate, burst: u64) -> BoundCheck {
    check_admissions_by(log, |start_ns, end_ns| {
        Some(burst.saturating_add(rate.units_in(end_ns - start_ns)))
    })
}

/// Checks every window `[start, end]` between two admission instants against
/// `bound(start_ns, end_ns)`; a window whose bound is `None` is not checked nor counted.
pub fn check_admissions_by(
    log: &[Admission],
    bound: impl Fn(u64, u64) -> Option<u64>,
) -> BoundCheck {
    let instants = group_by_instant(log);
    let mut out = BoundCheck::default();
    for (i, &(start_ns, _)) in instants.iter().enumerate() {
        let mut sum = 0u64;
        for &(end_ns, units) in &instants[i..] {
            sum += units;
            let Some(bound) = bound(start_ns, end_ns) else {
                continue;
            };
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

/// (instant, units admitted at it), in time order.
fn group_by_instant(log: &[Admission]) -> Vec<(u64, u64)> {
    let mut times: Vec<u64> = log.iter().map(|a| a.at_ns).collect();
    times.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for t in times {
        match out.last_mut() {
            Some((last, units)) if *last == t => *units += 1,
            _ => out.push((t, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(ms: u64) -> Admission {
        Admission {
            at_ns: ms * 1_000_000,
            agent: 0,
        }
    }

    #[test]
    fn flags_exactly_the_windows_over_the_bound() {
        let rate = Rate::per_second(10).unwrap();
        // Burst 2, one unit per 100 ms: three at once break it, spaced by 100 ms they don't.
        assert_eq!(
            check_admissions(&[at(0), at(0), at(0)], rate, 2).violations,
            1
        );
        let spaced = [at(0), at(0), at(100), at(200)];
        assert_eq!(check_admissions(&spaced, rate, 2).violations, 0);
        let early = [at(0), at(0), at(99)];
        let c = check_admissions(&early, rate, 2);
        assert_eq!((c.violations, c.worst_excess), (1, 1));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// The pairwise check agrees with a check on a 1 ms grid when every admission is on
        /// the grid.
        #[test]
        fn agrees_with_the_step_grid_check(
            ms in proptest::collection::vec(0u64..40, 0..40),
            burst in 0u64..6,
        ) {
            let rate = Rate::per_second(50).unwrap();
            let log: Vec<Admission> = ms.iter().map(|&m| at(m)).collect();
            let mut series = vec![0u64; 40];
            for &m in &ms {
                series[m as usize] += 1;
            }
            let grid = crate::bound::check_windows(&series, 1_000_000, rate, burst);
            let exact = check_admissions(&log, rate, burst);
            prop_assert_eq!(grid.violations > 0, exact.violations > 0);
            prop_assert_eq!(grid.worst_excess, exact.worst_excess);
        }
    }
}
