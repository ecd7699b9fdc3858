//! The budget bound of a window or calendar policy over a networked run's admissions.
//!
//! Every admission is placed on the grantor's timeline ([`super::timeline`]) and counted in
//! the window holding it, the windows worked out by the checker ([`Window::bounds`]):
//!
//! * fixed windows and calendar days: admitted units per window ≤ its limit;
//! * sliding windows: the same per aligned window (grants of a window come out of its own
//!   allowance, which the previous window's weight only lowers), and in every interval of
//!   length `T`, at most `limit + ⌊limit·T/W⌋`, the sliding counter's bound.
//!
//! An admission that cannot be placed (before the grantor applied anything) was made with
//! credit no grant could have given, and counts as a violation.

use super::check::{check_admissions_by, Admission};
use super::timeline::Timeline;
use super::windows::Window;
use crate::bound::BoundCheck;
use std::collections::BTreeMap;

/// Most windows one check lists: a run is at most 600 s long and windows at least 1 s.
const WINDOWS_MAX: usize = 1_000;

/// One window and what was admitted in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowCount {
    /// `[start, end)` on the grantor's timeline, in UNIX nanoseconds.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Units placed in it on the timeline.
    pub admitted: u64,
}

/// A window policy's bound over one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowCheck {
    pub window: Window,
    /// Every window the run's timeline reached or an admission was placed in, in order.
    pub windows: Vec<WindowCount>,
    /// Windows that admitted more than the limit, and by how much at most.
    pub over: u64,
    pub worst_excess: u64,
    /// Sliding windows: every interval between two placed admissions against
    /// `limit + ⌊limit·T/W⌋`.
    pub sliding: Option<BoundCheck>,
    /// Admissions in time order, `at_ns` their place on the timeline (UNIX ns).
    pub placed: Vec<Admission>,
    pub unplaced: u64,
    pub timeline: Timeline,
    /// The run's start in UNIX nanoseconds: true time is this plus simulated time.
    pub start_unix_ns: u64,
    /// The most units any window held when counted on true time instead (for comparison;
    /// not a bound, see [`super::timeline`]).
    pub most_on_true_time: u64,
}

impl WindowCheck {
    /// The check in the shape of the bucket bound: windows (and sliding intervals) checked,
    /// those over their bound (unplaced admissions counting one each), the worst excess.
    pub fn bound(&self) -> BoundCheck {
        let sliding = self.sliding.clone().unwrap_or_default();
        BoundCheck {
            windows: self.windows.len() as u64 + sliding.windows,
            violations: self.over + sliding.violations + self.unplaced,
            worst_excess: self.worst_excess.max(sliding.worst_excess),
            worst_start: 0,
        }
    }

    /// The most the run may have admitted: the limit of every window it touched.
    pub fn admitted_max(&self) -> u64 {
        self.window.limit() * self.windows.len() as u64
    }

    /// Where simulated time `at_ns` is on the timeline, in UNIX nanoseconds.
    pub fn place(&self, at_ns: u64) -> Option<u64> {
        self.timeline.place(at_ns)
    }
}

/// Checks `admissions` (at simulated time, in any order) of a run that started at UNIX time
/// `start_unix_ns` and lasted `duration_ns`, against `window`'s limit on `timeline`.
pub fn check_windows(
    admissions: &[Admission],
    timeline: Timeline,
    window: &Window,
    start_unix_ns: u64,
    duration_ns: u64,
) -> WindowCheck {
    let mut placed = Vec::with_capacity(admissions.len());
    let mut unplaced = 0;
    for a in admissions {
        match timeline.place(a.at_ns) {
            Some(at_ns) => placed.push(Admission { at_ns, ..*a }),
            None => unplaced += 1,
        }
    }
    placed.sort_unstable();
    let mut counts = reached_windows(&timeline, window, duration_ns);
    for a in &placed {
        if let Some((start_ns, end_ns)) = window.bounds(a.at_ns) {
            let c = counts.entry(start_ns).or_insert(WindowCount {
                start_ns,
                end_ns,
                admitted: 0,
            });
            c.admitted += 1;
        } else {
            unplaced += 1;
        }
    }
    let limit = window.limit();
    let windows: Vec<WindowCount> = counts.into_values().collect();
    let over_by = windows.iter().map(|w| w.admitted.saturating_sub(limit));
    let sliding = match window {
        Window::Sliding { window_ms, .. } => {
            let w_ns = u128::from(*window_ms) * 1_000_000;
            Some(check_admissions_by(&placed, |a, b| {
                let extra = u128::from(limit) * u128::from(b - a) / w_ns;
                Some(limit.saturating_add(u64::try_from(extra).unwrap_or(u64::MAX)))
            }))
        }
        _ => None,
    };
    WindowCheck {
        window: window.clone(),
        over: over_by.clone().filter(|e| *e > 0).count() as u64,
        worst_excess: over_by.max().unwrap_or(0),
        windows,
        sliding,
        unplaced,
        most_on_true_time: most_on_true_time(admissions, window, start_unix_ns),
        placed,
        timeline,
        start_unix_ns,
    }
}

/// The windows the timeline passed through from its first sample to the run's end, empty.
fn reached_windows(
    timeline: &Timeline,
    window: &Window,
    duration_ns: u64,
) -> BTreeMap<u64, WindowCount> {
    let mut out = BTreeMap::new();
    let (Some((first, _)), Some(last)) = (timeline.span(), timeline.place(duration_ns)) else {
        return out;
    };
    let mut at = first;
    while at < last && out.len() < WINDOWS_MAX {
        let Some((start_ns, end_ns)) = window.bounds(at) else {
            break;
        };
        out.insert(
            start_ns,
            WindowCount {
                start_ns,
                end_ns,
                admitted: 0,
            },
        );
        at = end_ns;
    }
    out
}

/// The most admissions any window holds when windows are laid on true time.
fn most_on_true_time(admissions: &[Admission], window: &Window, start_unix_ns: u64) -> u64 {
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for a in admissions {
        if let Some((start, _)) = window.bounds(start_unix_ns + a.at_ns) {
            *counts.entry(start).or_default() += 1;
        }
    }
    counts.into_values().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn at(ns: u64) -> Admission {
        Admission {
            at_ns: ns,
            agent: 0,
        }
    }

    /// A timeline that starts at UNIX 100 s and lags true time by `lag_ns` from 5 s on.
    fn lagging(lag_ns: u64) -> Timeline {
        let mut t = Timeline::default();
        for ms in (0..20_000).step_by(100) {
            let ns = ms * MS;
            let lag = if ns >= 5 * S { lag_ns } else { 0 };
            t.observe(ns, 100 * S + ns - lag);
        }
        t
    }

    #[test]
    fn counts_each_window_on_the_timeline_against_its_limit() {
        let w = Window::Fixed {
            window_ms: 10_000,
            limit: 3,
        };
        // Three just before true 110 s, which the timeline places before its 110 s as it lags
        // 50 ms; three right after true 110 s, still in the first window on the timeline.
        let log: Vec<Admission> = [9_990, 9_995, 9_999, 10_010, 10_020, 10_040]
            .iter()
            .map(|ms| at(ms * MS))
            .collect();
        let on_time = check_windows(&log, lagging(0), &w, 100 * S, 20 * S);
        assert_eq!((on_time.over, on_time.unplaced), (0, 0));
        assert_eq!(on_time.windows.len(), 2);
        let lagged = check_windows(&log, lagging(50 * MS), &w, 100 * S, 20 * S);
        assert_eq!((lagged.over, lagged.worst_excess), (1, 3));
        assert_eq!(lagged.most_on_true_time, 3);
        assert_eq!(lagged.bound().violations, 1);
    }

    #[test]
    fn a_sliding_window_allows_limit_plus_its_share_of_any_interval() {
        let w = Window::Sliding {
            window_ms: 10_000,
            limit: 10,
        };
        // 10 at the end of one window and 10 at the start of the next: 20 within 20 ms,
        // over 10 + ⌊10·0.02/10⌋ = 10.
        let mut log: Vec<Admission> = (0..10).map(|_| at(9_990 * MS)).collect();
        log.extend((0..10).map(|_| at(10_010 * MS)));
        let c = check_windows(&log, lagging(0), &w, 100 * S, 20 * S);
        assert_eq!(c.over, 0, "each aligned window holds 10");
        assert!(c.sliding.unwrap().violations > 0);
        // Spread out by a whole window they keep the bound.
        let mut spread: Vec<Admission> = (0..10).map(|_| at(0)).collect();
        spread.extend((0..10).map(|_| at(10_000 * MS)));
        let c = check_windows(&spread, lagging(0), &w, 100 * S, 20 * S);
        assert_eq!(c.bound().violations, 0);
    }

    #[test]
    fn an_admission_before_the_timeline_starts_is_a_violation() {
        let w = Window::Fixed {
            window_ms: 10_000,
            limit: 3,
        };
        let mut t = Timeline::default();
        t.observe(5 * MS, 100 * S);
        let c = check_windows(&[at(MS), at(6 * MS)], t, &w, 100 * S, S);
        assert_eq!((c.unplaced, c.bound().violations), (1, 1));
    }
}
