//! Shaping: admitting with a bounded delay instead of refusing (seed §4, "Leaky-bucket
//! shaping").
//!
//! A shaped take charges the units *at their departure time*: the limiter is asked at the
//! earliest instant the units exist, that instant becomes the request's departure, and the
//! caller waits `delay_ns` before the request goes. Because every charge is made at the
//! time its units leave, the limiter's own bound (`B + r·T` for buckets and GCRA, the limit
//! per window for windows) holds over departure times, not just decision times.
//!
//! A limiter's clock may then run ahead of real time (it has seen a departure in the
//! future). A later request is decided no earlier than that clock, so departures from one
//! limiter never go back in time and no unit leaves before the credit it was charged
//! against was earned. A refusal leaves the limiter exactly as it was, so it charges
//! nothing and moves no clock.

use super::{Decision, FixedWindow, Gcra, Limiter, SlidingWindow, TokenBucket};
use crate::time::Nanos;

/// A limiter whose latest time seen can be read: where a shaped take starts from.
pub trait Timeline {
    /// The latest time the limiter has decided at.
    fn clock(&self) -> Nanos;
}

impl Timeline for TokenBucket {
    fn clock(&self) -> Nanos {
        self.last()
    }
}

impl Timeline for Gcra {
    fn clock(&self) -> Nanos {
        self.last()
    }
}

impl Timeline for FixedWindow {
    fn clock(&self) -> Nanos {
        self.last()
    }
}

impl Timeline for SlidingWindow {
    fn clock(&self) -> Nanos {
        self.last()
    }
}

/// Outcome of a shaped take.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Shaped {
    /// Charged at `now + delay_ns`, when the request may go; `remaining` units are left
    /// then. `delay_ns` is 0 when the units were there already.
    Admit { remaining: u64, delay_ns: u64 },
    /// Not charged, nothing changed. `retry_after_ns` is when the same cost would be
    /// admitted with a delay of at most `max_delay_ns` if nothing else spends (`u64::MAX`:
    /// never). `waiting_full` says the units were there within the bound but the caller
    /// refused to hold one more waiting request.
    Deny {
        remaining: u64,
        retry_after_ns: u64,
        waiting_full: bool,
    },
}

impl Shaped {
    pub fn is_admit(&self) -> bool {
        matches!(self, Shaped::Admit { .. })
    }
}

/// Takes `cost` at `now`, or at the earliest later time within `max_delay_ns` at which the
/// limiter admits it. `may_wait(delay_ns)` is asked before a charge with a positive delay
/// is kept; answering `false` refuses the request (a cap on requests waiting at once).
///
/// With `max_delay_ns == 0` and a limiter whose clock is not ahead of `now`, this decides
/// as [`Limiter::try_take`] does.
pub fn take_shaped<L: Limiter + Timeline + Clone>(
    limiter: &mut L,
    cost: u64,
    now: Nanos,
    max_delay_ns: u64,
    may_wait: impl FnOnce(u64) -> bool,
) -> Shaped {
    let saved = limiter.clone();
    let base = now.max(limiter.clock());
    let lead = base.saturating_since(now);
    let deny = |limiter: &mut L, remaining: u64, wait_ns: u64, waiting_full: bool| {
        *limiter = saved.clone();
        let retry_after_ns = match wait_ns {
            u64::MAX => u64::MAX,
            wait => wait.saturating_sub(max_delay_ns),
        };
        Shaped::Deny {
            remaining,
            retry_after_ns,
            waiting_full,
        }
    };
    let (departure, remaining) = match limiter.try_take(cost, base) {
        Decision::Admit { remaining } => (base, remaining),
        Decision::Deny {
            remaining,
            retry_after_ns,
        } => {
            let wait = match retry_after_ns {
                u64::MAX => u64::MAX,
                r => lead.saturating_add(r),
            };
            if wait > max_delay_ns {
                return deny(limiter, remaining, wait, false);
            }
            let at = base.saturating_add_ns(retry_after_ns);
            match limiter.try_take(cost, at) {
                Decision::Admit { remaining } => (at, remaining),
                // The limiter's own hint was short: refuse rather than guess further.
                Decision::Deny { retry_after_ns, .. } => {
                    return deny(
                        limiter,
                        remaining,
                        wait.saturating_add(retry_after_ns),
                        false,
                    )
                }
            }
        }
    };
    let delay_ns = departure.saturating_since(now);
    if delay_ns > max_delay_ns {
        return deny(limiter, remaining, delay_ns, false);
    }
    if delay_ns > 0 && !may_wait(delay_ns) {
        // Told when the units are free without waiting: by then no slot is needed.
        return deny(limiter, 0, delay_ns.saturating_add(max_delay_ns), true);
    }
    Shaped::Admit {
        remaining,
        delay_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::Rate;

    const MS: u64 = 1_000_000;

    fn bucket() -> TokenBucket {
        TokenBucket::full(Rate::per_second(10).unwrap(), 1, Nanos(0))
    }

    #[test]
    fn delays_grow_by_the_emission_interval_up_to_the_bound() {
        let mut b = bucket();
        let mut take = |now| take_shaped(&mut b, 1, Nanos(now), 250 * MS, |_| true);
        let admit = |delay_ns| Shaped::Admit {
            remaining: 0,
            delay_ns,
        };
        assert_eq!(take(0), admit(0));
        assert_eq!(take(0), admit(100 * MS));
        assert_eq!(take(0), admit(200 * MS));
        // The next unit exists at 300 ms: 50 ms after the bound allows.
        let refused = take(0);
        assert_eq!(
            refused,
            Shaped::Deny {
                remaining: 0,
                retry_after_ns: 50 * MS,
                waiting_full: false
            }
        );
        // 10 ms on, the wait for the same unit is 290 ms: still beyond.
        assert!(!take(10 * MS).is_admit());
        assert_eq!(take(50 * MS), admit(250 * MS));
    }

    #[test]
    fn a_refusal_changes_nothing() {
        let mut b = bucket();
        assert!(take_shaped(&mut b, 1, Nanos(0), 0, |_| true).is_admit());
        let before = b.clone();
        assert!(!take_shaped(&mut b, 1, Nanos(0), 50 * MS, |_| true).is_admit());
        assert_eq!(b, before, "beyond the bound");
        let full = take_shaped(&mut b, 1, Nanos(0), 250 * MS, |_| false);
        assert_eq!(
            full,
            Shaped::Deny {
                remaining: 0,
                retry_after_ns: 100 * MS,
                waiting_full: true
            }
        );
        assert_eq!(b, before, "no waiting slot");
    }

    #[test]
    fn without_delay_it_decides_as_try_take() {
        let (mut shaped, mut plain) = (bucket(), bucket());
        for now in [0, 0, 50 * MS, 100 * MS, 100 * MS, 250 * MS] {
            let s = take_shaped(&mut shaped, 1, Nanos(now), 0, |_| unreachable!());
            let p = plain.try_take(1, Nanos(now));
            assert_eq!(s.is_admit(), p.is_admit(), "at {now}");
            if let Decision::Deny { retry_after_ns, .. } = p {
                assert!(matches!(s, Shaped::Deny { retry_after_ns: r, .. } if r == retry_after_ns));
            }
        }
    }

    #[test]
    fn a_window_shapes_into_the_next_window() {
        let mut w = FixedWindow::new(2, 100 * MS, Nanos(0)).unwrap();
        let mut take = |now| take_shaped(&mut w, 1, Nanos(now), 30 * MS, |_| true);
        assert!(take(80 * MS).is_admit());
        assert!(take(80 * MS).is_admit());
        assert_eq!(
            take(80 * MS),
            Shaped::Admit {
                remaining: 1,
                delay_ns: 20 * MS
            }
        );
        // The window's clock is at 100 ms now: a request at 90 ms goes then too.
        assert_eq!(
            take(90 * MS),
            Shaped::Admit {
                remaining: 0,
                delay_ns: 10 * MS
            }
        );
        assert!(!take(90 * MS).is_admit(), "the next window is full too");
    }

    #[test]
    fn cost_above_capacity_is_never_shaped() {
        let mut b = bucket();
        let never = take_shaped(&mut b, 2, Nanos(0), 60_000 * MS, |_| true);
        assert!(matches!(
            never,
            Shaped::Deny {
                retry_after_ns: u64::MAX,
                ..
            }
        ));
    }
}
