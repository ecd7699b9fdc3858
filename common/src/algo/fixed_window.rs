//! The fixed window counter: at most `limit` units per window of `window_ns`.
//!
//! Windows are aligned to multiples of `window_ns` on the timeline of the times given:
//! window `k` is `[k·W, (k+1)·W)`. Each window starts from zero; nothing carries over.
//! Callers pass UNIX time (nanoseconds since the epoch), so that a daily window ends at
//! 00:00 UTC and every process counting the same window agrees on where it starts.
//!
//! # Bound
//!
//! A closed interval `[a, b]` of length `T = b − a` meets at most `⌈T/W⌉ + 1` windows
//! (`⌊b/W⌋ − ⌊a/W⌋ ≤ ⌈T/W⌉`), so at most `limit × (⌈T/W⌉ + 1)` units are admitted in it.
//! The `+ 1` is the boundary burst: a full `limit` at `k·W − 1` and another full `limit`
//! at `k·W` put `2 × limit` into two nanoseconds. Use a fixed window where that burst is
//! acceptable (reporting, coarse quotas); prefer [`SlidingWindow`](super::SlidingWindow),
//! [`Gcra`](super::Gcra) or [`TokenBucket`](super::TokenBucket) where it is not.
//!
//! # Time
//!
//! A `now` earlier than the latest time seen is treated as that latest time (P3), so a
//! clock step backwards never reopens a finished window.

use super::window::{self, ns_until_window, validate};
use super::{Decision, Limiter};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

pub use super::window::WindowError;

/// Fixed window counter state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedWindow {
    limit: u64,
    window_ns: u64,
    /// Index of the window `count` belongs to.
    index: u64,
    count: u64,
    /// Latest time seen; earlier readings are treated as this.
    last: Nanos,
}

impl FixedWindow {
    /// An empty counter at `now`.
    pub fn new(limit: u64, window_ns: u64, now: Nanos) -> Result<FixedWindow, WindowError> {
        validate(limit, window_ns)?;
        Ok(FixedWindow {
            limit,
            window_ns,
            index: now.0 / window_ns,
            count: 0,
            last: now,
        })
    }

    /// A counter that has `count` units charged in the window holding `now` (state kept
    /// across a restart).
    pub fn with_count(
        limit: u64,
        window_ns: u64,
        now: Nanos,
        count: u64,
    ) -> Result<FixedWindow, WindowError> {
        let mut window = FixedWindow::new(limit, window_ns, now)?;
        window.count = count;
        Ok(window)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// Latest time seen.
    pub fn last(&self) -> Nanos {
        self.last
    }

    /// Units charged in the current window (as of the latest time seen).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// `[start, end)` of the window holding `now` (clamped to the latest time seen), in
    /// nanoseconds; the end saturates at the end of the timeline.
    pub fn window_bounds(&self, now: Nanos) -> (Nanos, Nanos) {
        let index = now.max(self.last).0 / self.window_ns;
        let start = Nanos(index * self.window_ns);
        (start, start.saturating_add_ns(self.window_ns))
    }

    /// Moves to the window holding `now` (never backwards); returns the clamped time.
    fn advance(&mut self, now: Nanos) -> Nanos {
        let now = window::observe(&mut self.last, now);
        window::roll([&mut self.count], &mut self.index, now.0 / self.window_ns);
        now
    }
}

impl FixedWindow {
    /// Counts `cost` whether or not it fits, as envoyproxy/ratelimit's counters do:
    /// admitted when the window's count after it is within the limit. A refused cost still
    /// counts, so a smaller one after it is refused too until the window ends; a cost of 0
    /// checks without charging (refused only once the count is over the limit).
    pub fn take_counting_denied(&mut self, cost: u64, now: Nanos) -> Decision {
        let now = self.advance(now);
        self.count = self.count.saturating_add(cost);
        if self.count <= self.limit {
            return Decision::Admit {
                remaining: self.limit - self.count,
            };
        }
        let retry_after_ns = if cost > self.limit {
            u64::MAX
        } else {
            ns_until_window(u128::from(self.index) + 1, self.window_ns, now)
        };
        Decision::Deny {
            remaining: 0,
            retry_after_ns,
        }
    }
}

impl Limiter for FixedWindow {
    fn try_take(&mut self, cost: u64, now: Nanos) -> Decision {
        let now = self.advance(now);
        // A count carried over from a counting window or a larger limit may exceed it.
        let remaining = self.limit.saturating_sub(self.count);
        // The next window starts from zero, so a cost within the limit fits there.
        let next = u128::from(self.index) + 1;
        let d = window::decide(self.limit, remaining, cost, || {
            ns_until_window(next, self.window_ns, now)
        });
        if d.is_admit() {
            self.count += cost;
        }
        d
    }

    /// Returns units charged in the current window. A charge in a finished window is not
    /// returned: that window's allowance is gone either way.
    fn refund(&mut self, cost: u64, charged_at: Nanos) {
        let charged = charged_at.0 / self.window_ns;
        window::refund([&mut self.count], self.index, charged, cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 1_000;

    #[test]
    fn admits_limit_then_denies_until_next_window() {
        let mut f = FixedWindow::new(3, W, Nanos(0)).unwrap();
        for left in [2, 1, 0] {
            assert_eq!(
                f.try_take(1, Nanos(10)),
                Decision::Admit { remaining: left }
            );
        }
        assert_eq!(
            f.try_take(1, Nanos(250)),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 750
            }
        );
        assert!(!f.try_take(1, Nanos(999)).is_admit());
        assert_eq!(
            f.try_take(1, Nanos(1_000)),
            Decision::Admit { remaining: 2 }
        );
    }

    #[test]
    fn boundary_burst_is_two_limits_in_two_nanoseconds() {
        let mut f = FixedWindow::new(5, W, Nanos(0)).unwrap();
        assert!(f.try_take(5, Nanos(W - 1)).is_admit());
        assert!(f.try_take(5, Nanos(W)).is_admit());
        assert!(!f.try_take(1, Nanos(W)).is_admit());
    }

    #[test]
    fn weighted_cost_and_above_limit() {
        let mut f = FixedWindow::new(10, W, Nanos(0)).unwrap();
        assert_eq!(f.try_take(7, Nanos(0)), Decision::Admit { remaining: 3 });
        assert_eq!(
            f.try_take(4, Nanos(100)),
            Decision::Deny {
                remaining: 3,
                retry_after_ns: 900
            }
        );
        assert_eq!(
            f.try_take(11, Nanos(5 * W)),
            Decision::Deny {
                remaining: 10,
                retry_after_ns: u64::MAX
            }
        );
    }

    #[test]
    fn rollback_does_not_reopen_a_window() {
        let mut f = FixedWindow::new(2, W, Nanos(0)).unwrap();
        assert!(f.try_take(2, Nanos(500)).is_admit());
        assert!(f.try_take(2, Nanos(1_200)).is_admit());
        // Back into the first window: still the second window, which is full.
        assert_eq!(
            f.try_take(1, Nanos(400)),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 800
            }
        );
        assert_eq!(f.window_bounds(Nanos(0)), (Nanos(W), Nanos(2 * W)));
    }

    #[test]
    fn refund_only_in_the_current_window() {
        let mut f = FixedWindow::new(4, W, Nanos(0)).unwrap();
        assert!(f.try_take(3, Nanos(10)).is_admit());
        f.refund(2, Nanos(10));
        assert_eq!(f.count(), 1);
        f.refund(9, Nanos(10));
        assert_eq!(f.count(), 0);
        assert!(f.try_take(4, Nanos(20)).is_admit());
        assert!(f.try_take(1, Nanos(W + 1)).is_admit());
        f.refund(4, Nanos(20));
        assert_eq!(f.count(), 1);
    }

    #[test]
    fn last_window_of_the_timeline() {
        let mut f = FixedWindow::new(1, W, Nanos(u64::MAX)).unwrap();
        assert!(f.try_take(1, Nanos::MAX).is_admit());
        assert_eq!(
            f.try_take(1, Nanos::MAX),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: u64::MAX
            }
        );
        assert_eq!(
            f.window_bounds(Nanos::MAX).0,
            Nanos(u64::MAX / W * W),
            "window start stays on the timeline"
        );
    }

    #[test]
    fn counting_denied_costs_keeps_them() {
        let mut f = FixedWindow::new(3, W, Nanos(0)).unwrap();
        assert_eq!(
            f.take_counting_denied(2, Nanos(0)),
            Decision::Admit { remaining: 1 }
        );
        let deny = Decision::Deny {
            remaining: 0,
            retry_after_ns: W,
        };
        assert_eq!(f.take_counting_denied(2, Nanos(0)), deny, "2 + 2 > 3");
        assert_eq!(f.count(), 4, "the refused cost counts");
        assert_eq!(f.take_counting_denied(0, Nanos(0)), deny, "a check, over");
        assert_eq!(f.take_counting_denied(1, Nanos(0)), deny);
        assert_eq!(
            f.take_counting_denied(0, Nanos(W)),
            Decision::Admit { remaining: 3 },
            "a check charges nothing"
        );
        assert!(f.take_counting_denied(3, Nanos(W)).is_admit());
        assert_eq!(
            f.take_counting_denied(0, Nanos(W)),
            Decision::Admit { remaining: 0 },
            "a full window is not over"
        );
    }

    #[test]
    fn a_count_above_the_limit_refuses_until_the_window_ends() {
        let mut f = FixedWindow::with_count(3, W, Nanos(10), 5).unwrap();
        assert_eq!(
            f.try_take(1, Nanos(10)),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: W - 10
            }
        );
        assert!(f.try_take(3, Nanos(W)).is_admit());
    }

    #[test]
    fn refused_configurations() {
        assert_eq!(
            FixedWindow::new(0, W, Nanos(0)),
            Err(WindowError::ZeroLimit)
        );
        assert_eq!(
            FixedWindow::new(1, 0, Nanos(0)),
            Err(WindowError::ZeroWindow)
        );
    }
}
