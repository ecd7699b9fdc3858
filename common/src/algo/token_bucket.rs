//! The token bucket: rate `r`, burst `B`, weighted cost.
//!
//! Credit is counted in whole `tokens` plus a remainder `frac` (a numerator over the rate's
//! period). Refill stops at the cap, and at the cap the remainder is dropped, which keeps
//! `tokens + frac/period <= cap` at all times and so at most `B + r·T` units in any window
//! of length `T`. The ledger passes a lower cap (`B` minus outstanding leased credit) so the
//! same bound covers credit spent elsewhere.

use super::{Decision, Limiter};
use crate::rate::Rate;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBucket {
    rate: Rate,
    burst: u64,
    tokens: u64,
    frac: u64,
    last: Nanos,
    /// Time and units of the newest admission, the only one a refund may undo: undoing an
    /// older one after later admissions could put back credit those relied on being gone.
    last_take_at: Nanos,
    last_take_units: u64,
}

impl TokenBucket {
    /// A bucket holding its whole burst at `now`.
    pub fn full(rate: Rate, burst: u64, now: Nanos) -> Self {
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            frac: 0,
            last: now,
            last_take_at: now,
            last_take_units: 0,
        }
    }

    /// A bucket holding nothing at `now` (a conservative start after a restart).
    pub fn empty(rate: Rate, burst: u64, now: Nanos) -> Self {
        TokenBucket {
            rate,
            burst,
            tokens: 0,
            frac: 0,
            last: now,
            last_take_at: now,
            last_take_units: 0,
        }
    }

    /// A bucket holding `tokens` and a remainder `frac` (over the rate's period) at `now`:
    /// state carried across a restart. Never more than the burst, and a remainder that is
    /// not below the period is dropped (it would mint a unit nobody earned).
    pub fn with_credit(rate: Rate, burst: u64, tokens: u64, frac: u64, now: Nanos) -> Self {
        let tokens = tokens.min(burst);
        let frac = if tokens < burst && frac < rate.period_ns() {
            frac
        } else {
            0
        };
        TokenBucket {
            tokens,
            frac,
            ..TokenBucket::empty(rate, burst, now)
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Whole tokens as of the last refill.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Credit below one unit as of the last refill: a numerator over the rate's period.
    pub fn frac(&self) -> u64 {
        self.frac
    }

    /// Time of the last refill.
    pub fn last(&self) -> Nanos {
        self.last
    }

    /// Refills up to `cap` (never above the burst). Returns `true` if `now` was behind the
    /// last refill and was treated as no elapsed time.
    #[inline]
    pub fn refill_capped(&mut self, now: Nanos, cap: u64) -> bool {
        let cap = cap.min(self.burst);
        if now < self.last {
            return true;
        }
        let elapsed_ns = now.saturating_since(self.last);
        self.last = now;
        if self.tokens >= cap {
            self.frac = 0;
            return false;
        }
        let (whole, frac) = self.rate.produce(elapsed_ns, self.frac);
        let total = self.tokens.saturating_add(whole);
        if total >= cap {
            self.tokens = cap;
            self.frac = 0;
        } else {
            self.tokens = total;
            self.frac = frac;
        }
        false
    }

    #[inline]
    pub fn refill(&mut self, now: Nanos) -> bool {
        self.refill_capped(now, self.burst)
    }

    /// Removes `units` without a time step; the caller has refilled and checked.
    /// Returns `false` (and changes nothing) if fewer tokens are held.
    #[inline]
    pub fn take_exact(&mut self, units: u64) -> bool {
        if self.tokens < units {
            return false;
        }
        self.tokens -= units;
        true
    }

    /// Puts back `units` removed earlier by [`take_exact`](Self::take_exact), up to `cap`.
    /// Returns the units that did not fit (dropped, never minted).
    pub fn give_back(&mut self, units: u64, cap: u64) -> u64 {
        let cap = cap.min(self.burst);
        let room = cap.saturating_sub(self.tokens);
        let fits = units.min(room);
        self.tokens += fits;
        if self.tokens >= cap {
            self.frac = 0;
        }
        units - fits
    }

    /// Nanoseconds until `units` tokens exist, if nothing else spends.
    #[inline]
    pub fn ns_until(&self, units: u64) -> u64 {
        if units > self.burst {
            return u64::MAX;
        }
        self.rate
            .ns_until(units.saturating_sub(self.tokens), self.frac)
    }

    /// Changes rate and burst in place (a policy update), keeping earned credit but never
    /// more than the new burst.
    pub fn reconfigure(&mut self, rate: Rate, burst: u64, now: Nanos) {
        self.refill(now);
        if rate != self.rate {
            // The remainder is a numerator over the old period; dropping it loses less
            // than one unit and never mints.
            self.frac = 0;
        }
        self.rate = rate;
        self.burst = burst;
        if self.tokens >= burst {
            self.tokens = burst;
            self.frac = 0;
        }
    }
}

impl Limiter for TokenBucket {
    #[inline]
    fn try_take(&mut self, cost: u64, now: Nanos) -> Decision {
        self.refill(now);
        if self.take_exact(cost) {
            if self.last_take_at != self.last {
                self.last_take_at = self.last;
                self.last_take_units = 0;
            }
            self.last_take_units += cost;
            Decision::Admit {
                remaining: self.tokens,
            }
        } else {
            Decision::Deny {
                remaining: self.tokens,
                retry_after_ns: self.ns_until(cost),
            }
        }
    }

    fn refund(&mut self, cost: u64, charged_at: Nanos) {
        if charged_at != self.last_take_at {
            return;
        }
        let units = cost.min(self.last_take_units);
        self.last_take_units -= units;
        self.give_back(units, self.burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_sec(n: u64) -> Rate {
        Rate::per_second(n).unwrap()
    }

    #[test]
    fn admits_burst_then_refills_at_rate() {
        let mut b = TokenBucket::full(per_sec(10), 5, Nanos(0));
        for _ in 0..5 {
            assert!(b.try_take(1, Nanos(0)).is_admit());
        }
        let d = b.try_take(1, Nanos(0));
        assert_eq!(
            d,
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 100_000_000
            }
        );
        assert!(b.try_take(1, Nanos(100_000_000)).is_admit());
    }

    #[test]
    fn rollback_mints_nothing() {
        let mut b = TokenBucket::empty(per_sec(1000), 1000, Nanos::from_secs(10));
        assert!(b.refill(Nanos::from_secs(5)));
        assert_eq!(b.tokens(), 0);
        b.refill(Nanos::from_secs(10));
        assert_eq!(b.tokens(), 0);
        b.refill(Nanos::from_secs(10).saturating_add_ns(1_000_000));
        assert_eq!(b.tokens(), 1);
    }

    #[test]
    fn cost_above_burst_is_never_admissible() {
        let mut b = TokenBucket::full(per_sec(10), 5, Nanos(0));
        assert_eq!(
            b.try_take(6, Nanos::from_secs(100)),
            Decision::Deny {
                remaining: 5,
                retry_after_ns: u64::MAX
            }
        );
    }

    #[test]
    fn refund_undoes_only_the_newest_admission() {
        let mut b = TokenBucket::full(per_sec(10), 5, Nanos(0));
        assert!(b.try_take(5, Nanos(0)).is_admit());
        let later = Nanos::from_secs(1);
        assert!(b.try_take(5, later).is_admit());
        b.refund(5, Nanos(0));
        assert!(
            !b.try_take(1, later).is_admit(),
            "stale refund minted credit"
        );
        b.refund(3, later);
        assert_eq!(b.tokens(), 3);
        b.refund(9, later);
        assert_eq!(b.tokens(), 5, "refund limited to what was charged");
    }

    #[test]
    fn with_credit_keeps_what_fits_and_refills_from_it() {
        let mut b = TokenBucket::with_credit(per_sec(10), 5, 2, 500_000_000, Nanos(7));
        assert_eq!((b.tokens(), b.frac(), b.last()), (2, 500_000_000, Nanos(7)));
        // Half a unit held: one more after 50 ms, not 100 ms.
        b.refill(Nanos(7 + 50_000_000));
        assert_eq!(b.tokens(), 3);
        let over = TokenBucket::with_credit(per_sec(10), 5, 9, 1, Nanos(0));
        assert_eq!(
            (over.tokens(), over.frac()),
            (5, 0),
            "never above the burst"
        );
        let bad = TokenBucket::with_credit(per_sec(10), 5, 1, 1_000_000_000, Nanos(0));
        assert_eq!(bad.frac(), 0, "a remainder of a whole unit is dropped");
    }

    #[test]
    fn capped_refill_respects_held_credit() {
        let mut b = TokenBucket::empty(per_sec(100), 100, Nanos(0));
        b.refill_capped(Nanos::from_secs(10), 40);
        assert_eq!(b.tokens(), 40);
        assert_eq!(b.give_back(70, 100), 10);
        assert_eq!(b.tokens(), 100);
    }
}
