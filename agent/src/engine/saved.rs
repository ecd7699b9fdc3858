//! One local limiter's state as a standalone agent keeps it across a restart, and the way
//! back into a limiter.
//!
//! Times are UNIX nanoseconds, never monotonic readings: the monotonic clock restarts with
//! the process, UNIX time does not. A state is taken only while it still has an effect (a
//! window not ended, a bucket not full again), and put back only into a policy whose
//! parameters it depends on are unchanged and only if it still has an effect then; in every
//! other case the key starts afresh, as it would under a changed policy anyway.
//! `concurrency` has no saved state: the requests in flight ended with the process that
//! held them, so a restarted agent rightly counts none.

use super::local::{LocalLimiter, LocalSpec, LocalTime};
use leasehold_common::algo::{FixedWindow, Gcra, SlidingWindow, TokenBucket};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;

/// What one key's limiter holds, on the UNIX timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SavedState {
    /// A fixed window's count (also one counting refused costs).
    Window {
        window_ns: u64,
        /// Which window: its start over `window_ns`.
        index: u64,
        count: u64,
    },
    /// A sliding window's counts of the window holding `last_unix_ns` and the one before.
    Sliding {
        window_ns: u64,
        last_unix_ns: u64,
        current: u64,
        previous: u64,
    },
    /// A calendar quota's use of the period `[start, end)`.
    Calendar {
        start_unix_ns: i64,
        end_unix_ns: i64,
        used: u64,
    },
    /// A token bucket's credit at `at_unix_ns`: whole tokens and a remainder over the
    /// rate's period.
    TokenBucket {
        units: u64,
        period_ns: u64,
        burst: u64,
        tokens: u64,
        frac: u64,
        at_unix_ns: u64,
    },
    /// A GCRA limiter's theoretical arrival time: whole nanoseconds and a remainder over
    /// the rate's units.
    Gcra {
        units: u64,
        period_ns: u64,
        burst: u64,
        tat_unix_ns: u64,
        tat_frac: u64,
    },
}

/// One key's saved state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedLimiter {
    pub policy_id: String,
    /// The key as held in the key table.
    pub key: String,
    pub state: SavedState,
}

impl LocalLimiter {
    /// This limiter's state at `at`; `None` when forgetting it would change no answer (its
    /// window ended, its bucket is full again, nothing was charged this period).
    pub(crate) fn saved(&self, at: LocalTime) -> Option<SavedState> {
        if self.rest_at(at) <= at.mono {
            return None;
        }
        let unix_of_mono = |mono: u64| mono.saturating_add(at.unix_offset_ns);
        let state = match self {
            LocalLimiter::FixedWindow(w) | LocalLimiter::CountingWindow(w) => {
                let (start, _) = w.window_bounds(w.last());
                SavedState::Window {
                    window_ns: w.window_ns(),
                    index: start.0 / w.window_ns(),
                    count: w.count(),
                }
            }
            LocalLimiter::SlidingWindow(w) => {
                let (current, previous) = w.counts();
                SavedState::Sliding {
                    window_ns: w.window_ns(),
                    last_unix_ns: w.last().0,
                    current,
                    previous,
                }
            }
            LocalLimiter::Calendar(q) => {
                let (start, end) = q.current_period()?;
                SavedState::Calendar {
                    start_unix_ns: i64::try_from(start.as_nanosecond()).ok()?,
                    end_unix_ns: i64::try_from(end.as_nanosecond()).ok()?,
                    used: q.used(),
                }
            }
            LocalLimiter::TokenBucket(b) => SavedState::TokenBucket {
                units: b.rate().units(),
                period_ns: b.rate().period_ns(),
                burst: b.burst(),
                tokens: b.tokens(),
                frac: b.frac(),
                at_unix_ns: unix_of_mono(b.last().0),
            },
            LocalLimiter::Gcra(g) => {
                let (tat_ns, tat_frac) = g.tat_exact();
                SavedState::Gcra {
                    units: g.rate().units(),
                    period_ns: g.rate().period_ns(),
                    burst: g.burst(),
                    tat_unix_ns: unix_of_mono(tat_ns),
                    tat_frac,
                }
            }
        };
        Some(state)
    }
}

impl SavedState {
    /// The UNIX time from which this state has no effect: the window or period has ended,
    /// both sliding counts have slid out, the bucket is full again, the arrival time has
    /// passed. A state is never put back from then on.
    pub fn ends_unix_ns(&self) -> u64 {
        match *self {
            SavedState::Window {
                window_ns, index, ..
            } => index.saturating_add(1).saturating_mul(window_ns),
            SavedState::Sliding {
                window_ns,
                last_unix_ns,
                ..
            } => (last_unix_ns / window_ns.max(1))
                .saturating_add(2)
                .saturating_mul(window_ns),
            SavedState::Calendar { end_unix_ns, .. } => u64::try_from(end_unix_ns).unwrap_or(0),
            SavedState::TokenBucket {
                units,
                period_ns,
                burst,
                tokens,
                frac,
                at_unix_ns,
            } => match Rate::new(units, period_ns) {
                Ok(rate) => at_unix_ns.saturating_add(
                    TokenBucket::with_credit(rate, burst, tokens, frac, Nanos::ZERO)
                        .ns_until(burst),
                ),
                Err(_) => 0,
            },
            SavedState::Gcra {
                tat_unix_ns,
                tat_frac,
                ..
            } => tat_unix_ns.saturating_add(u64::from(tat_frac > 0)),
        }
    }

    /// [`restore`](Self::restore) for a shaping policy, whose limiter's clock may have been
    /// ahead of the save (departures scheduled within `max_delay`). A bucket or window
    /// still ahead of `at` is put back that far ahead, as it was: placed at `at`, a bucket
    /// would hand out at once credit that only accrues by its scheduled departures, and a
    /// window of a later index would be dropped with the departures it counts.
    pub(crate) fn restore_shaped(&self, spec: &LocalSpec, at: LocalTime) -> Option<LocalLimiter> {
        let unix = at.mono.saturating_add_ns(at.unix_offset_ns);
        let limiter = match (self, spec) {
            (
                &SavedState::TokenBucket {
                    units,
                    period_ns,
                    burst,
                    tokens,
                    frac,
                    at_unix_ns,
                },
                &LocalSpec::TokenBucket { rate, burst: b },
            ) if (units, period_ns, burst) == (rate.units(), rate.period_ns(), b)
                && at_unix_ns > unix.0 =>
            {
                let ahead = at.mono.saturating_add_ns(at_unix_ns - unix.0);
                LocalLimiter::TokenBucket(TokenBucket::with_credit(
                    rate, burst, tokens, frac, ahead,
                ))
            }
            (
                &SavedState::Window {
                    window_ns,
                    index,
                    count,
                },
                &LocalSpec::FixedWindow {
                    limit,
                    window_ns: w,
                },
            ) if w == window_ns && index > unix.0 / w => {
                let start = Nanos(index.checked_mul(w)?);
                LocalLimiter::FixedWindow(FixedWindow::with_count(limit, w, start, count).ok()?)
            }
            _ => return self.restore(spec, at),
        };
        (limiter.rest_at(at) > at.mono).then_some(limiter)
    }

    /// A limiter of `spec` holding this state at `at`; `None` if `spec` is not the one the
    /// state was taken under (another algorithm, window, period, rate or burst) or the
    /// state no longer has an effect at `at`.
    pub(crate) fn restore(&self, spec: &LocalSpec, at: LocalTime) -> Option<LocalLimiter> {
        let unix = at.mono.saturating_add_ns(at.unix_offset_ns);
        let limiter = match (self, spec) {
            (
                &SavedState::Window {
                    window_ns,
                    index,
                    count,
                },
                &(LocalSpec::FixedWindow {
                    limit,
                    window_ns: w,
                }
                | LocalSpec::CountingWindow {
                    limit,
                    window_ns: w,
                }),
            ) => {
                if w != window_ns || unix.0 / w != index {
                    return None;
                }
                let window = FixedWindow::with_count(limit, w, unix, count).ok()?;
                match spec {
                    LocalSpec::CountingWindow { .. } => LocalLimiter::CountingWindow(window),
                    _ => LocalLimiter::FixedWindow(window),
                }
            }
            (
                &SavedState::Sliding {
                    window_ns,
                    last_unix_ns,
                    current,
                    previous,
                },
                &LocalSpec::SlidingWindow {
                    limit,
                    window_ns: w,
                },
            ) if w == window_ns => LocalLimiter::SlidingWindow(
                SlidingWindow::with_counts(limit, w, Nanos(last_unix_ns), current, previous)
                    .ok()?,
            ),
            (
                &SavedState::Calendar {
                    start_unix_ns,
                    end_unix_ns,
                    used,
                },
                LocalSpec::Calendar { prototype },
            ) => {
                let ts = |ns: i64| jiff::Timestamp::from_nanosecond(i128::from(ns)).ok();
                let period = (ts(start_unix_ns)?, ts(end_unix_ns)?);
                let quota = prototype.clone().resumed(used, period, at.wall)?;
                LocalLimiter::Calendar(Box::new(quota))
            }
            (
                &SavedState::TokenBucket {
                    units,
                    period_ns,
                    burst,
                    tokens,
                    frac,
                    at_unix_ns,
                },
                &LocalSpec::TokenBucket { rate, burst: b },
            ) if (units, period_ns, burst) == (rate.units(), rate.period_ns(), b) => {
                // Refilled on the UNIX timeline up to the restart, then placed at the
                // monotonic reading of that instant. A UNIX time behind the save counts as
                // no time passed (P3).
                let mut bucket =
                    TokenBucket::with_credit(rate, burst, tokens, frac, Nanos(at_unix_ns));
                bucket.refill(unix);
                LocalLimiter::TokenBucket(TokenBucket::with_credit(
                    rate,
                    burst,
                    bucket.tokens(),
                    bucket.frac(),
                    at.mono,
                ))
            }
            (
                &SavedState::Gcra {
                    units,
                    period_ns,
                    burst,
                    tat_unix_ns,
                    tat_frac,
                },
                &LocalSpec::Gcra { rate, burst: b },
            ) if (units, period_ns, burst) == (rate.units(), rate.period_ns(), b) => {
                // The arrival time as a distance from the restart, then from its monotonic
                // reading; one at or before the restart is a full limiter.
                let ahead_ns = tat_unix_ns
                    .checked_sub(unix.0)
                    .filter(|&ns| ns > 0 || tat_frac > 0)?;
                let tat = at.mono.saturating_add_ns(ahead_ns);
                LocalLimiter::Gcra(Gcra::with_tat(rate, burst, tat.0, tat_frac, at.mono).ok()?)
            }
            _ => return None,
        };
        (limiter.rest_at(at) > at.mono).then_some(limiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter_store::codec;
    use leasehold_common::algo::{CalendarPeriod, CalendarQuota};
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;
    /// 2026-03-01T23:59:50Z: the day's quota ends within the charges below.
    const UNIX_START_NS: u64 = 1_772_409_590 * SEC;

    fn spec(kind: usize) -> LocalSpec {
        let rate = Rate::new(5, SEC).unwrap();
        match kind {
            0 => LocalSpec::FixedWindow {
                limit: 5,
                window_ns: SEC,
            },
            1 => LocalSpec::CountingWindow {
                limit: 5,
                window_ns: SEC,
            },
            2 => LocalSpec::SlidingWindow {
                limit: 5,
                window_ns: SEC,
            },
            3 => LocalSpec::Calendar {
                prototype: CalendarQuota::new(5, CalendarPeriod::Day, "UTC").unwrap(),
            },
            4 => LocalSpec::TokenBucket { rate, burst: 5 },
            _ => LocalSpec::Gcra { rate, burst: 5 },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]
        /// A limiter saved, written, read back and put into a process whose monotonic
        /// clock started elsewhere decides every later request as the original would have.
        #[test]
        fn a_restored_limiter_decides_as_the_original(
            kind in 0usize..6,
            charges in prop::collection::vec((0u64..4, 0u64..SEC / 2), 0..12),
            gap_ns in 0u64..3 * SEC,
            mono_before_ns in 0u64..1_000 * SEC,
            mono_after_ns in 0u64..10 * SEC,
            later in prop::collection::vec((0u64..4, 0u64..SEC / 2), 1..12),
        ) {
            let spec = spec(kind);
            let before = UNIX_START_NS - mono_before_ns;
            let mut mono = mono_before_ns;
            let mut original = spec.build(Nanos(mono));
            for (cost, dt_ns) in charges {
                mono += dt_ns;
                original.try_take(cost, LocalTime::from_unix(Nanos(mono), before));
            }
            let saved = original.saved(LocalTime::from_unix(Nanos(mono), before));
            let read = saved.map(|s| codec::decode(&codec::encode(&s)).unwrap());
            // The restart: UNIX time moved on by the gap, the monotonic clock started over.
            let unix_ns = before + mono + gap_ns;
            let after = unix_ns - mono_after_ns;
            let mut mono_after = mono_after_ns;
            let at = LocalTime::from_unix(Nanos(mono_after), after);
            let mut restored = read
                .and_then(|s| s.restore(&spec, at))
                .unwrap_or_else(|| spec.build(Nanos(mono_after)));
            mono += gap_ns;
            for (cost, dt_ns) in later {
                mono += dt_ns;
                mono_after += dt_ns;
                let want = original.try_take(cost, LocalTime::from_unix(Nanos(mono), before));
                let got = restored.try_take(cost, LocalTime::from_unix(Nanos(mono_after), after));
                prop_assert_eq!(got, want);
            }
        }
    }

    /// A state is not put into a policy of another algorithm.
    #[test]
    fn no_state_goes_into_another_algorithm() {
        let at = LocalTime::from_unix(Nanos(SEC), UNIX_START_NS);
        for kind in 0..6 {
            let mut l = spec(kind).build(Nanos(SEC));
            l.try_take(3, at);
            let s = l.saved(at).unwrap();
            for other in 0..6 {
                // A fixed window's count fits a counting one and back: one rule either way.
                let same = kind == other || (kind < 2 && other < 2);
                assert_eq!(
                    s.restore(&spec(other), at).is_some(),
                    same,
                    "{kind} {other}"
                );
            }
        }
    }
}
