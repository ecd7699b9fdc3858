//! Limits enforced inside this process: `process` scope, window, calendar and concurrency
//! algorithms. Their state is per key in this engine only; they are not leased.

use leasehold_common::algo::{
    CalendarPeriod as AlgoPeriod, CalendarQuota, Decision as AlgoDecision, FixedWindow, Gcra,
    Limiter, SlidingWindow, TokenBucket,
};
use leasehold_common::policy::{Algorithm, CalendarPeriod, Policy};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use thiserror::Error;

/// Why a policy cannot be enforced locally.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LocalConfigError {
    #[error("policy '{policy}': {field} is required by algorithm {algorithm}")]
    Missing {
        policy: String,
        field: &'static str,
        algorithm: &'static str,
    },
    #[error("policy '{policy}': {field}: {reason}")]
    Invalid {
        policy: String,
        field: &'static str,
        reason: String,
    },
}

/// The parameters a local limiter is built from, checked once per policy version so that
/// creating a key's state cannot fail.
#[derive(Clone, Debug)]
pub(crate) enum LocalSpec {
    TokenBucket {
        rate: Rate,
        burst: u64,
    },
    Gcra {
        rate: Rate,
        burst: u64,
    },
    FixedWindow {
        limit: u64,
        window_ns: u64,
    },
    /// A fixed window that counts refused costs too.
    CountingWindow {
        limit: u64,
        window_ns: u64,
    },
    SlidingWindow {
        limit: u64,
        window_ns: u64,
    },
    Calendar {
        prototype: CalendarQuota,
    },
}

fn missing(policy: &Policy, field: &'static str) -> LocalConfigError {
    LocalConfigError::Missing {
        policy: policy.id.clone(),
        field,
        algorithm: policy.algorithm.name(),
    }
}

fn invalid(policy: &Policy, field: &'static str, reason: impl ToString) -> LocalConfigError {
    LocalConfigError::Invalid {
        policy: policy.id.clone(),
        field,
        reason: reason.to_string(),
    }
}

impl LocalSpec {
    /// The spec for `policy`; `None` for `concurrency`, which keeps a bare counter.
    pub(crate) fn of(policy: &Policy) -> Result<Option<LocalSpec>, LocalConfigError> {
        let rate = || -> Result<Rate, LocalConfigError> {
            let spec = policy.rate.ok_or_else(|| missing(policy, "rate"))?;
            spec.to_rate().map_err(|e| invalid(policy, "rate", e))
        };
        let spec = match policy.algorithm {
            Algorithm::TokenBucket => LocalSpec::TokenBucket {
                rate: rate()?,
                burst: policy.burst().ok_or_else(|| missing(policy, "burst"))?,
            },
            Algorithm::Gcra => {
                let (rate, burst) = (rate()?, policy.burst().unwrap_or(1));
                Gcra::full(rate, burst, Nanos::ZERO).map_err(|e| invalid(policy, "burst", e))?;
                LocalSpec::Gcra { rate, burst }
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                let r = rate()?;
                let (limit, window_ns) = (r.units(), r.period_ns());
                if policy.algorithm == Algorithm::FixedWindow {
                    LocalSpec::FixedWindow { limit, window_ns }
                } else {
                    LocalSpec::SlidingWindow { limit, window_ns }
                }
            }
            Algorithm::CalendarQuota => {
                let cal = policy
                    .calendar
                    .as_ref()
                    .ok_or_else(|| missing(policy, "calendar"))?;
                let period = match cal.period {
                    CalendarPeriod::Day => AlgoPeriod::Day,
                    CalendarPeriod::Week => AlgoPeriod::Week,
                    CalendarPeriod::Month => AlgoPeriod::Month,
                    CalendarPeriod::Year => AlgoPeriod::Year,
                };
                let prototype = CalendarQuota::new(cal.units, period, &cal.time_zone)
                    .map_err(|e| invalid(policy, "calendar", e))?;
                LocalSpec::Calendar { prototype }
            }
            Algorithm::Concurrency => return Ok(None),
        };
        Ok(Some(spec))
    }

    /// This spec with fixed windows counting refused costs too (others unchanged).
    pub(crate) fn counting_denied(self) -> LocalSpec {
        match self {
            LocalSpec::FixedWindow { limit, window_ns } => {
                LocalSpec::CountingWindow { limit, window_ns }
            }
            other => other,
        }
    }

    /// A fresh limiter with its whole limit available at `now`.
    pub(crate) fn build(&self, now: Nanos) -> LocalLimiter {
        match self {
            LocalSpec::TokenBucket { rate, burst } => {
                LocalLimiter::TokenBucket(TokenBucket::full(*rate, *burst, now))
            }
            // Checked in `of`, so construction cannot fail here; a drained limiter is the
            // conservative answer if it ever did.
            LocalSpec::Gcra { rate, burst } => LocalLimiter::Gcra(
                Gcra::full(*rate, *burst, now)
                    .or_else(|_| Gcra::full(*rate, 1, now))
                    .expect("a burst of one is always representable"),
            ),
            // Windows count on the UNIX timeline (`LocalTime::unix`): made at its origin,
            // a counter moves to the current window at its first charge.
            LocalSpec::FixedWindow { limit, window_ns } => LocalLimiter::FixedWindow(
                FixedWindow::new(*limit, *window_ns, Nanos::ZERO).expect("checked positive"),
            ),
            LocalSpec::CountingWindow { limit, window_ns } => LocalLimiter::CountingWindow(
                FixedWindow::new(*limit, *window_ns, Nanos::ZERO).expect("checked positive"),
            ),
            LocalSpec::SlidingWindow { limit, window_ns } => LocalLimiter::SlidingWindow(
                SlidingWindow::new(*limit, *window_ns, Nanos::ZERO).expect("checked positive"),
            ),
            LocalSpec::Calendar { prototype } => {
                LocalLimiter::Calendar(Box::new(prototype.clone()))
            }
        }
    }
}

/// One key's local limiter.
#[derive(Clone, Debug)]
pub(crate) enum LocalLimiter {
    TokenBucket(TokenBucket),
    Gcra(Gcra),
    FixedWindow(FixedWindow),
    /// Charged with [`FixedWindow::take_counting_denied`].
    CountingWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    /// Boxed: its time zone makes it twice the size of the others, and every key of the
    /// table holds a limiter's worth of space.
    Calendar(Box<CalendarQuota>),
}

/// The outcome of one local charge, with what the response reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalCharge {
    pub admitted: bool,
    pub remaining: u64,
    pub retry_after_ns: u64,
    pub reset_after_ns: u64,
}

impl LocalLimiter {
    /// Charges `cost` at `at`. One dispatch on the algorithm for the charge and its reset
    /// time together.
    #[inline]
    pub(crate) fn try_take(&mut self, cost: u64, at: LocalTime) -> LocalCharge {
        let now = at.mono;
        match self {
            LocalLimiter::TokenBucket(l) => {
                let decision = l.try_take(cost, now);
                charge(decision, l.ns_until(l.burst()))
            }
            LocalLimiter::Gcra(l) => {
                let decision = l.try_take(cost, now);
                charge(decision, l.tat().saturating_since(now))
            }
            LocalLimiter::FixedWindow(l) => {
                let unix = at.unix();
                let decision = l.try_take(cost, unix);
                charge(decision, l.window_bounds(unix).1.saturating_since(unix))
            }
            LocalLimiter::CountingWindow(l) => {
                let unix = at.unix();
                let decision = l.take_counting_denied(cost, unix);
                charge(decision, l.window_bounds(unix).1.saturating_since(unix))
            }
            LocalLimiter::SlidingWindow(l) => charge(l.try_take(cost, at.unix()), l.window_ns()),
            LocalLimiter::Calendar(l) => {
                let wall = at.wall;
                let decision = l.try_take(cost, wall);
                let reset_after_ns = l.current_period().map_or(0, |(_, end)| {
                    let ns = end.as_nanosecond() - wall.as_nanosecond();
                    u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
                });
                charge(decision, reset_after_ns)
            }
        }
    }

    /// Undoes a charge made at `at` (a later dimension refused the request).
    pub(crate) fn refund(&mut self, cost: u64, at: LocalTime) {
        match self {
            LocalLimiter::TokenBucket(l) => l.refund(cost, at.mono),
            LocalLimiter::Gcra(l) => l.refund(cost, at.mono),
            LocalLimiter::FixedWindow(l) | LocalLimiter::CountingWindow(l) => {
                l.refund(cost, at.unix())
            }
            LocalLimiter::SlidingWindow(l) => l.refund(cost, at.unix()),
            LocalLimiter::Calendar(l) => l.refund(cost, at.wall),
        }
    }

    /// The first monotonic time from which forgetting this limiter changes no later
    /// answer, if it is not charged again: a fresh one made then would decide every
    /// request as this one would (its window ended, its bucket is full again, nothing was
    /// charged this period). `at` places windows and periods on the monotonic timeline.
    pub(crate) fn rest_at(&self, at: LocalTime) -> Nanos {
        let mono_of_unix = |unix: u64| Nanos(unix.saturating_sub(at.unix_offset_ns));
        match self {
            LocalLimiter::TokenBucket(l) => bucket_rest_at(l),
            LocalLimiter::Gcra(l) => l.tat(),
            LocalLimiter::FixedWindow(l) | LocalLimiter::CountingWindow(l) => {
                if l.count() == 0 {
                    return Nanos::ZERO;
                }
                mono_of_unix(l.window_bounds(l.last()).1 .0)
            }
            LocalLimiter::SlidingWindow(l) => {
                if l.used(at.unix()) == 0 {
                    return Nanos::ZERO;
                }
                // The window after the latest one ends with both counts slid out.
                let w = l.window_ns();
                let end = (l.last().0 / w).saturating_add(2).saturating_mul(w);
                mono_of_unix(end)
            }
            LocalLimiter::Calendar(l) => match l.current_period() {
                _ if l.used() == 0 => Nanos::ZERO,
                Some((_, end)) => {
                    let ns = u64::try_from(end.as_nanosecond()).unwrap_or(u64::MAX);
                    mono_of_unix(ns)
                }
                None => Nanos::ZERO,
            },
        }
    }

    /// Whether deciding needs the wall clock (calendar quotas).
    pub(crate) fn reads_wall(&self) -> bool {
        matches!(self, LocalLimiter::Calendar(_))
    }
}

/// When a local limiter decides: buckets read the monotonic time, windows the same
/// instant on the UNIX timeline (aligned to the epoch), calendar quotas wall time.
#[derive(Copy, Clone, Debug)]
pub(crate) struct LocalTime {
    pub mono: Nanos,
    /// UNIX time at monotonic zero.
    pub unix_offset_ns: u64,
    pub wall: jiff::Timestamp,
}

impl LocalTime {
    /// `mono` with the wall time read off the UNIX timeline rather than the wall clock:
    /// for deciding whether state may be forgotten, where a second's skew between the two
    /// only moves the moment a key is dropped.
    pub(crate) fn from_unix(mono: Nanos, unix_offset_ns: u64) -> LocalTime {
        let unix = mono.saturating_add_ns(unix_offset_ns);
        let wall =
            jiff::Timestamp::from_nanosecond(i128::from(unix.0)).unwrap_or(jiff::Timestamp::MAX);
        LocalTime {
            mono,
            unix_offset_ns,
            wall,
        }
    }

    fn unix(&self) -> Nanos {
        self.mono.saturating_add_ns(self.unix_offset_ns)
    }
}

/// When `bucket` holds its whole burst again if nothing spends meanwhile.
pub(crate) fn bucket_rest_at(bucket: &TokenBucket) -> Nanos {
    bucket
        .last()
        .saturating_add_ns(bucket.ns_until(bucket.burst()))
}

/// A charge's outcome from the algorithm's decision, with the time until the limit is whole.
#[inline(always)]
fn charge(decision: AlgoDecision, reset_after_ns: u64) -> LocalCharge {
    let (admitted, remaining, retry_after_ns) = match decision {
        AlgoDecision::Admit { remaining } => (true, remaining, 0),
        AlgoDecision::Deny {
            remaining,
            retry_after_ns,
        } => (false, remaining, retry_after_ns),
    };
    LocalCharge {
        admitted,
        remaining,
        retry_after_ns,
        reset_after_ns,
    }
}
