//! What each window of a window-budget run did, on the grantor's timeline: units offered
//! and admitted against the limit, and the longest stall before the limit was reached.

use super::each_round;
use crate::net::{NetConfig, WindowCheck};

/// One window of a run, as the scenario reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowFigures {
    /// `[start, end)` on the grantor's timeline, in UNIX nanoseconds.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Requests the agents' traffic offered while the timeline was in the window.
    pub offered: u64,
    pub admitted: u64,
    /// The part of the window inside the run, in milliseconds of the timeline.
    pub in_run_ms: u64,
    /// Longest stretch of the window inside the run with no admission before the limit was
    /// reached (or before its last admission, when it never was), in milliseconds of the
    /// timeline.
    pub stall_ms: u64,
}

impl WindowFigures {
    /// Admitted in percent of `limit`.
    pub fn utilisation_pct(&self, limit: u64) -> u64 {
        self.admitted * 100 / limit.max(1)
    }

    /// Whether the agents offered at least twice the limit while the window was in the run:
    /// a window its demand should have filled.
    pub fn busy(&self, limit: u64) -> bool {
        self.offered >= 2 * limit
    }
}

/// Every window of `check`, with what `cfg`'s traffic under `seed` offered in it.
pub fn window_figures(seed: u64, cfg: &NetConfig, check: &WindowCheck) -> Vec<WindowFigures> {
    let limit = check.window.limit();
    let Some((run_from, _)) = check.timeline.span() else {
        return Vec::new();
    };
    let run_until = check.place(cfg.duration_ms * 1_000_000).unwrap_or(run_from);
    let mut offered = vec![0u64; check.windows.len()];
    let index_of = |at_ns: u64| {
        check
            .windows
            .iter()
            .position(|w| (w.start_ns..w.end_ns).contains(&at_ns))
    };
    each_round(seed, cfg, |_, at_ms, n| {
        let window = check.place(at_ms * 1_000_000).and_then(index_of);
        if let Some(i) = window {
            offered[i] += n;
        }
    });
    check
        .windows
        .iter()
        .zip(offered)
        .map(|(w, offered)| {
            let (from, until) = (w.start_ns.max(run_from), w.end_ns.min(run_until));
            let placed: Vec<u64> = check
                .placed
                .iter()
                .map(|a| a.at_ns)
                .filter(|t| (w.start_ns..w.end_ns).contains(t))
                .collect();
            // Stalls count until the limit was reached, or until the last admission when it
            // never was (the rest of the allowance stranded with a crashed holder, say):
            // waiting after that is the policy, not a stall.
            let last = placed.last().copied().unwrap_or(until);
            let filled = placed.get(limit as usize - 1).copied().unwrap_or(last);
            WindowFigures {
                start_ns: w.start_ns,
                end_ns: w.end_ns,
                offered,
                admitted: w.admitted,
                in_run_ms: until.saturating_sub(from) / 1_000_000,
                stall_ms: longest_gap_ns(&placed, from, filled.max(from)) / 1_000_000,
            }
        })
        .collect()
}

/// The longest stretch of `[from, until]` without an instant of `at` (sorted).
fn longest_gap_ns(at: &[u64], from: u64, until: u64) -> u64 {
    let mut last = from;
    let mut longest = 0;
    for &t in at.iter().filter(|t| (from..=until).contains(*t)) {
        longest = longest.max(t - last);
        last = t;
    }
    longest.max(until - last)
}

/// Units admitted so far in the window holding simulated time `at_ms`, on the timeline.
pub fn used_in_window(check: &WindowCheck, at_ms: u64) -> u64 {
    let Some(now) = check.place(at_ms * 1_000_000) else {
        return 0;
    };
    let Some((start, _)) = check.window.bounds(now) else {
        return 0;
    };
    let upto = |t: u64| check.placed.partition_point(|a| a.at_ns <= t);
    let before = check.placed.partition_point(|a| a.at_ns < start);
    (upto(now) - before) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_counts_the_edges() {
        assert_eq!(longest_gap_ns(&[3, 4, 9], 0, 10), 5);
        assert_eq!(longest_gap_ns(&[3, 4], 0, 20), 16);
        assert_eq!(longest_gap_ns(&[], 5, 7), 2);
        assert_eq!(
            longest_gap_ns(&[1, 30], 5, 7),
            2,
            "instants outside ignored"
        );
    }
}
