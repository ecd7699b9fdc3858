//! Shaping in the engine: a local key's charge made at its departure time, and the cap on
//! requests admitted with a delay that have not departed yet.
//!
//! Leased keys shape with a schedule of their own over the credit they hold
//! ([`super::paced`]); they share the waiting cap kept here.

use super::admit::{Ctx, Step};
use super::check::over_limit;
use super::decision::Outcome;
use super::local::{LocalCharge, LocalLimiter, LocalTime};
use super::stats::Count;
use super::table::EntryState;
use super::undo::{ChargeKind, Found};
use super::Engine;
use leasehold_common::algo::{take_shaped, Limiter, Shaped, Timeline};
use leasehold_common::time::Nanos;
use parking_lot::Mutex;

/// Departure times (monotonic ns) of requests admitted with a delay. A request counts as
/// waiting until its departure time has passed or it says it has gone, whichever is first:
/// a caller of the network APIs waits on its own side, so the engine cannot see it leave.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// At most `max` entries; allocated once, so holding a place never allocates.
    departures: Mutex<Vec<u64>>,
    max: usize,
}

impl Waiting {
    pub(crate) fn new(max: usize) -> Self {
        Waiting {
            departures: Mutex::new(Vec::with_capacity(max)),
            max,
        }
    }

    /// Holds a place for a request departing at `departure`, if fewer than the cap are
    /// waiting at `now`.
    pub(crate) fn try_hold(&self, now: Nanos, departure: Nanos) -> bool {
        let mut d = self.departures.lock();
        d.retain(|&at| at > now.0);
        if d.len() >= self.max {
            return false;
        }
        d.push(departure.0);
        true
    }

    /// Gives back the place of one request departing at `departure`, if still held.
    pub(crate) fn release(&self, departure: Nanos) {
        let mut d = self.departures.lock();
        if let Some(i) = d.iter().position(|&at| at == departure.0) {
            d.swap_remove(i);
        }
    }

    /// Requests waiting at `now`.
    pub(crate) fn count(&self, now: Nanos) -> usize {
        self.departures
            .lock()
            .iter()
            .filter(|&&at| at > now.0)
            .count()
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

impl Engine {
    /// A local key of a shaping policy. Every request to such a key goes through the
    /// shaped take, whether or not it may wait: the limiter's clock may be ahead of `now`,
    /// and a request that cannot wait must not depart before that clock.
    pub(crate) fn check_local_shaped(
        &self,
        entry: Found<'_>,
        units: u64,
        max_delay_ns: u64,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let EntryState::Local(limiter) = &entry.state else {
            unreachable!("called for local entries only");
        };
        let max_delay_ns = if ctx.accept_delay { max_delay_ns } else { 0 };
        let now = ctx.now;
        let at = LocalTime {
            mono: now,
            unix_offset_ns: ctx.unix_offset_ns(),
            wall: jiff::Timestamp::UNIX_EPOCH,
        };
        let mut waiting_full = false;
        let may_wait = |delay_ns: u64| {
            let held = self.waiting.try_hold(now, now.saturating_add_ns(delay_ns));
            waiting_full = !held;
            held
        };
        let (charge, delay_ns) = limiter
            .lock()
            .take_shaped(units, at, max_delay_ns, may_wait);
        if waiting_full {
            self.counters.bump(Count::ShapedWaitingFull);
        }
        if !charge.admitted {
            return over_limit(&charge);
        }
        if ctx.keep {
            // Only a request that may not wait is kept for undoing, and it departs now:
            // its charge time is `now`, as a refund expects.
            ctx.charged(ChargeKind::Local, entry, units);
        }
        if delay_ns > 0 {
            self.counters.bump(Count::ShapedAdmitted);
            ctx.delay_ns = delay_ns;
        }
        Step {
            outcome: Outcome::Admitted,
            remaining: charge.remaining,
            reset_after_ns: charge.reset_after_ns,
            retry_after_ns: 0,
        }
    }
}

impl LocalLimiter {
    /// Charges `cost` at `at` or up to `max_delay_ns` later (see
    /// [`take_shaped`](leasehold_common::algo::take_shaped)); returns the charge and its
    /// delay. Windows shape on the UNIX timeline they count on; the delay is the same on
    /// either. Algorithms without a time at which units come back (calendar quotas, which
    /// validation keeps from shaping) decide as [`try_take`](Self::try_take) does.
    pub(crate) fn take_shaped(
        &mut self,
        cost: u64,
        at: LocalTime,
        max_delay_ns: u64,
        may_wait: impl FnOnce(u64) -> bool,
    ) -> (LocalCharge, u64) {
        let unix = at.mono.saturating_add_ns(at.unix_offset_ns);
        match self {
            LocalLimiter::TokenBucket(l) => shape(l, cost, at.mono, max_delay_ns, may_wait, |l| {
                l.ns_until(l.burst())
            }),
            LocalLimiter::Gcra(l) => shape(l, cost, at.mono, max_delay_ns, may_wait, |l| {
                l.tat().saturating_since(l.last())
            }),
            LocalLimiter::FixedWindow(l) => shape(l, cost, unix, max_delay_ns, may_wait, |l| {
                l.window_bounds(l.last()).1.saturating_since(l.last())
            }),
            LocalLimiter::SlidingWindow(l) => {
                shape(l, cost, unix, max_delay_ns, may_wait, |l| l.window_ns())
            }
            LocalLimiter::CountingWindow(_) | LocalLimiter::Calendar(_) => {
                (self.try_take(cost, at), 0)
            }
        }
    }
}

/// A shaped take on `l` at `now` on its own timeline, with the time until it is whole
/// again measured from `now` (its clock may be ahead of `now`).
fn shape<L: Limiter + Timeline + Clone>(
    l: &mut L,
    cost: u64,
    now: Nanos,
    max_delay_ns: u64,
    may_wait: impl FnOnce(u64) -> bool,
    whole_after_ns: impl Fn(&L) -> u64,
) -> (LocalCharge, u64) {
    let shaped = take_shaped(l, cost, now, max_delay_ns, may_wait);
    let reset_after_ns = l
        .clock()
        .saturating_since(now)
        .saturating_add(whole_after_ns(l));
    match shaped {
        Shaped::Admit {
            remaining,
            delay_ns,
        } => (
            LocalCharge {
                admitted: true,
                remaining,
                retry_after_ns: 0,
                reset_after_ns,
            },
            delay_ns,
        ),
        Shaped::Deny {
            remaining,
            retry_after_ns,
            ..
        } => (
            LocalCharge {
                admitted: false,
                remaining,
                retry_after_ns,
                reset_after_ns,
            },
            0,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_places_free_at_departure_or_on_release() {
        let w = Waiting::new(2);
        assert!(w.try_hold(Nanos(0), Nanos(100)));
        assert!(w.try_hold(Nanos(0), Nanos(200)));
        assert!(!w.try_hold(Nanos(0), Nanos(300)), "cap reached");
        assert_eq!(w.count(Nanos(0)), 2);
        assert!(w.try_hold(Nanos(100), Nanos(300)), "the first has departed");
        w.release(Nanos(200));
        assert_eq!(w.count(Nanos(100)), 1);
        assert!(w.try_hold(Nanos(150), Nanos(400)));
        assert!(!w.try_hold(Nanos(150), Nanos(500)));
    }
}
