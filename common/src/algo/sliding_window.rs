//! The sliding window counter: about `limit` units per `window_ns`, without a log.
//!
//! Counts are kept for the current aligned window `[k·W, (k+1)·W)` and the one before it.
//! At `e` nanoseconds into the current window the estimate of the last `W` nanoseconds is
//!
//! `used = current + ⌈previous × (W − e) / W⌉`
//!
//! rounded up so the estimate never under-counts, and `cost` is admitted when
//! `used + cost ≤ limit`.
//!
//! # Bound
//!
//! Let `E(t) = current + previous·(W − e)/W` be the unrounded estimate. It is continuous
//! across window edges (at `e = 0` the previous window weighs in fully, which is the value
//! the window had at its end), it only rises at admissions (by their cost), and between
//! admissions it falls at `previous/W ≤ limit/W` per nanosecond. Every admission leaves
//! `E ≤ limit` (the rounded check is stricter), and `E ≥ 0`. So the units admitted at times
//! in any closed interval `[a, b]`, `T = b − a`, number at most
//!
//! `E(b) − E(a⁻) + (limit/W)·T ≤ limit + ⌊limit·T/W⌋`
//!
//! — the token bucket bound for rate `limit/W` and burst `limit`. The boundary burst is
//! therefore small: after a full `limit` at `k·W − 1`, at most `⌊limit·e/W⌋` more fit by
//! `k·W + e`, against a whole second `limit` for a [`FixedWindow`](super::FixedWindow).
//!
//! # Time
//!
//! A `now` earlier than the latest time seen is treated as that latest time (P3).

use super::window::{self, ns_until_window, validate, WindowError};
use super::{Decision, Limiter};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Sliding window counter state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidingWindow {
    limit: u64,
    window_ns: u64,
    /// Index of the window `current` belongs to; `previous` belongs to `index − 1`.
    index: u64,
    current: u64,
    previous: u64,
    /// Latest time seen; earlier readings are treated as this.
    last: Nanos,
}

impl SlidingWindow {
    /// An empty counter at `now`.
    pub fn new(limit: u64, window_ns: u64, now: Nanos) -> Result<SlidingWindow, WindowError> {
        validate(limit, window_ns)?;
        Ok(SlidingWindow {
            limit,
            window_ns,
            index: now.0 / window_ns,
            current: 0,
            previous: 0,
            last: now,
        })
    }

    /// A counter whose latest time seen is `last`, with `current` units charged in the
    /// window holding it and `previous` in the one before: state carried across a restart.
    pub fn with_counts(
        limit: u64,
        window_ns: u64,
        last: Nanos,
        current: u64,
        previous: u64,
    ) -> Result<SlidingWindow, WindowError> {
        Ok(SlidingWindow {
            current,
            previous,
            ..SlidingWindow::new(limit, window_ns, last)?
        })
    }

    /// Units charged in the window holding the latest time seen and in the one before.
    pub fn counts(&self) -> (u64, u64) {
        (self.current, self.previous)
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

    /// The rounded-up estimate of units used in the `W` nanoseconds before `now` (clamped
    /// to the latest time seen), without changing anything.
    pub fn used(&self, now: Nanos) -> u64 {
        let mut probe = self.clone();
        let elapsed_ns = probe.advance(now);
        probe.used_at(elapsed_ns)
    }

    /// Moves to the window holding `now` (never backwards); returns the nanoseconds
    /// elapsed in that window.
    fn advance(&mut self, now: Nanos) -> u64 {
        let now = window::observe(&mut self.last, now);
        let index = now.0 / self.window_ns;
        window::roll(
            [&mut self.current, &mut self.previous],
            &mut self.index,
            index,
        );
        now.0 % self.window_ns
    }

    /// `⌈previous × (W − e) / W⌉`: the previous window's share still inside the sliding
    /// window, rounded up.
    fn previous_share(&self, elapsed_ns: u64) -> u64 {
        let w = u128::from(self.window_ns);
        let share = u128::from(self.previous) * (w - u128::from(elapsed_ns));
        // At most `previous`, so it fits.
        share.div_ceil(w) as u64
    }

    fn used_at(&self, elapsed_ns: u64) -> u64 {
        self.current.saturating_add(self.previous_share(elapsed_ns))
    }

    /// Smallest elapsed time `e' < W` in a window whose previous count is `previous` at
    /// which `⌈previous × (W − e') / W⌉ ≤ room`; `W` if none.
    fn first_fit(&self, previous: u64, room: u64) -> u64 {
        if previous == 0 {
            return 0;
        }
        let w = u128::from(self.window_ns);
        // ⌈p(W − e')/W⌉ ≤ s  ⟺  p(W − e') ≤ sW  ⟺  e' ≥ W − ⌊sW/p⌋.
        let slack = u128::from(room) * w / u128::from(previous);
        w.saturating_sub(slack) as u64
    }

    /// Exact wait from `e` nanoseconds into the current window until `cost ≤ limit` fits,
    /// if nothing else spends meanwhile.
    fn wait_ns(&self, elapsed_ns: u64, cost: u64) -> u64 {
        let now = self.last;
        if let Some(room) = self.limit.checked_sub(self.current.saturating_add(cost)) {
            let at = self.first_fit(self.previous, room);
            if at < self.window_ns {
                return at - elapsed_ns;
            }
        }
        // In the next window the current count becomes the previous one.
        let at = self.first_fit(self.current, self.limit - cost);
        let next = u128::from(self.index) + 1;
        let start_wait = ns_until_window(next, self.window_ns, now);
        if at == self.window_ns {
            // Only once the whole of the current count has slid out: the window after.
            return ns_until_window(next + 1, self.window_ns, now);
        }
        start_wait.saturating_add(at)
    }
}

impl Limiter for SlidingWindow {
    fn try_take(&mut self, cost: u64, now: Nanos) -> Decision {
        let elapsed_ns = self.advance(now);
        let remaining = self.limit.saturating_sub(self.used_at(elapsed_ns));
        let d = window::decide(self.limit, remaining, cost, || {
            self.wait_ns(elapsed_ns, cost)
        });
        if d.is_admit() {
            self.current += cost;
        }
        d
    }

    /// Returns units charged in the current or the previous window (both still weigh in
    /// the estimate); charges older than that no longer count and are ignored.
    fn refund(&mut self, cost: u64, charged_at: Nanos) {
        let charged = charged_at.0 / self.window_ns;
        let counts = [&mut self.current, &mut self.previous];
        window::refund(counts, self.index, charged, cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 1_000;

    #[test]
    fn admits_limit_then_denies() {
        let mut s = SlidingWindow::new(4, W, Nanos(0)).unwrap();
        for left in [3, 2, 1, 0] {
            assert_eq!(
                s.try_take(1, Nanos(100)),
                Decision::Admit { remaining: left }
            );
        }
        // Nothing slides out until the next window begins, then a quarter every 250 ns.
        assert_eq!(
            s.try_take(1, Nanos(100)),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 1_150
            }
        );
        assert!(!s.try_take(1, Nanos(1_249)).is_admit());
        assert_eq!(
            s.try_take(1, Nanos(1_250)),
            Decision::Admit { remaining: 0 }
        );
    }

    #[test]
    fn retry_after_is_exact_within_the_window() {
        let mut s = SlidingWindow::new(10, W, Nanos(0)).unwrap();
        assert!(s.try_take(10, Nanos(900)).is_admit());
        assert!(s.try_take(2, Nanos(1_200)).is_admit());
        // used at e = 200: 2 + ⌈10 × 800/1000⌉ = 10. Three more fit once
        // ⌈10 × (1000 − e)/1000⌉ ≤ 5, i.e. e ≥ 500.
        let Decision::Deny { retry_after_ns, .. } = s.try_take(3, Nanos(1_200)) else {
            panic!("must deny");
        };
        assert_eq!(retry_after_ns, 300);
        let mut early = s.clone();
        assert!(!early.try_take(3, Nanos(1_499)).is_admit());
        assert!(s.try_take(3, Nanos(1_500)).is_admit());
    }

    #[test]
    fn retry_after_when_the_whole_window_must_slide_out() {
        let mut s = SlidingWindow::new(5, W, Nanos(0)).unwrap();
        assert!(s.try_take(1, Nanos(10)).is_admit());
        // A cost of the whole limit needs the previous share to be zero: only at 2·W.
        let d = s.try_take(5, Nanos(10));
        assert_eq!(
            d,
            Decision::Deny {
                remaining: 4,
                retry_after_ns: 2 * W - 10
            }
        );
        let mut early = s.clone();
        assert!(!early.try_take(5, Nanos(2 * W - 1)).is_admit());
        assert!(s.try_take(5, Nanos(2 * W)).is_admit());
    }

    #[test]
    fn boundary_burst_is_limited_by_interpolation() {
        let mut s = SlidingWindow::new(10, W, Nanos(0)).unwrap();
        assert!(s.try_take(10, Nanos(W - 1)).is_admit());
        assert!(!s.try_take(1, Nanos(W)).is_admit());
        // ⌊10 × 250/1000⌋ = 2 fit by 250 ns into the next window.
        assert!(s.try_take(2, Nanos(W + 250)).is_admit());
        assert!(!s.try_take(1, Nanos(W + 250)).is_admit());
    }

    #[test]
    fn weighted_cost_and_above_limit() {
        let mut s = SlidingWindow::new(10, W, Nanos(0)).unwrap();
        assert_eq!(s.try_take(7, Nanos(0)), Decision::Admit { remaining: 3 });
        assert_eq!(
            s.try_take(11, Nanos(0)),
            Decision::Deny {
                remaining: 3,
                retry_after_ns: u64::MAX
            }
        );
    }

    #[test]
    fn with_counts_resumes_the_estimate() {
        let mut s = SlidingWindow::new(10, W, Nanos(0)).unwrap();
        assert!(s.try_take(6, Nanos(900)).is_admit());
        assert!(s.try_take(3, Nanos(1_200)).is_admit());
        let (current, previous) = s.counts();
        assert_eq!((current, previous), (3, 6));
        let resumed = SlidingWindow::with_counts(10, W, s.last(), current, previous).unwrap();
        assert_eq!(resumed, s);
        assert_eq!(resumed.used(Nanos(1_500)), s.used(Nanos(1_500)));
    }

    #[test]
    fn rollback_does_not_reopen_or_slide() {
        let mut s = SlidingWindow::new(2, W, Nanos(0)).unwrap();
        assert!(s.try_take(2, Nanos(1_500)).is_admit());
        assert_eq!(s.used(Nanos(100)), 2);
        assert!(!s.try_take(1, Nanos(100)).is_admit());
        assert_eq!(s.last(), Nanos(1_500));
    }

    #[test]
    fn refund_current_and_previous_windows() {
        let mut s = SlidingWindow::new(10, W, Nanos(0)).unwrap();
        assert!(s.try_take(6, Nanos(100)).is_admit());
        assert!(s.try_take(3, Nanos(W)).is_admit());
        assert_eq!(s.used(Nanos(W)), 9);
        s.refund(1, Nanos(W));
        s.refund(4, Nanos(100));
        assert_eq!(s.used(Nanos(W)), 4);
        s.refund(99, Nanos(W));
        s.refund(99, Nanos(100));
        assert_eq!(s.used(Nanos(W)), 0);
        assert!(s.try_take(5, Nanos(3 * W)).is_admit());
        s.refund(5, Nanos(100));
        assert_eq!(s.used(Nanos(3 * W)), 5);
    }
}
