//! What a holder of a contended key is owed: the ledger's memory for splitting a key by
//! weight *over time*.
//!
//! Capping each grant at a holder's fair share is not enough when holders spend at once and
//! come straight back: whoever asks more often takes more. So each holder earns its fair
//! share continuously, like a token bucket of its own that fills at `share` per refresh
//! horizon and holds at most one horizon's share; grants draw it down. Credit other waiting
//! holders have earned is held for them; anything beyond that goes to whoever asks.

use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Fixed-point scale: entitlements are kept in millionths of a unit so that a share that
/// earns less than a unit between two asks still adds up.
const MICRO: u128 = 1_000_000;

/// A holder's earned and not yet granted share, and the last time it was short of credit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entitlement {
    /// Earned and not yet granted, in millionths of a unit, as of `at`.
    micro: u64,
    at: Nanos,
    /// When the holder last received less than it asked for (denials included).
    short_at: Option<Nanos>,
}

impl Entitlement {
    /// Units owed at `now` to a holder whose fair share is `share` per `horizon_ns`.
    pub fn owed(&self, now: Nanos, share: u64, horizon_ns: u64) -> u64 {
        u64::try_from(self.owed_micro(now, share, horizon_ns) / MICRO).unwrap_or(u64::MAX)
    }

    /// True when the holder was short of credit within `window_ns` before `now`: it is
    /// waiting, so what it is owed is held for it.
    pub fn waiting(&self, now: Nanos, window_ns: u64) -> bool {
        self.short_at
            .is_some_and(|t| now.saturating_since(t) < window_ns)
    }

    /// Notes a grant of `units` at `now` for an ask of `asked` units, by a holder whose
    /// fair share is `share` per `horizon_ns` (zero when the key is not contended).
    pub fn note(&mut self, units: u64, asked: u64, now: Nanos, share: u64, horizon_ns: u64) {
        let owed = self.owed_micro(now, share, horizon_ns);
        let left = owed.saturating_sub(u128::from(units) * MICRO);
        self.micro = u64::try_from(left).unwrap_or(u64::MAX);
        self.at = self.at.max(now);
        if units < asked {
            self.short_at = Some(now);
        } else if units > 0 {
            self.short_at = None;
        }
    }

    /// Credit handed back unspent is owed again (up to one horizon's share, on reading).
    pub fn hand_back(&mut self, units: u64) {
        let micro = u128::from(units) * MICRO;
        self.micro = u64::try_from(u128::from(self.micro) + micro).unwrap_or(u64::MAX);
    }

    /// Earned as of `now`: what was left at `at` plus the share earned since, at most one
    /// horizon's share. A time behind `at` (a clock step back) earns nothing.
    fn owed_micro(&self, now: Nanos, share: u64, horizon_ns: u64) -> u128 {
        let cap = u128::from(share) * MICRO;
        let elapsed = u128::from(now.saturating_since(self.at));
        let earned = cap * elapsed / u128::from(horizon_ns.max(1));
        (u128::from(self.micro) + earned).min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 1_000;

    #[test]
    fn a_share_is_earned_over_one_horizon_and_capped_there() {
        let e = Entitlement::default();
        assert_eq!(e.owed(Nanos(0), 100, H), 0);
        assert_eq!(e.owed(Nanos(250), 100, H), 25);
        assert_eq!(e.owed(Nanos(1_000), 100, H), 100);
        assert_eq!(e.owed(Nanos(5_000), 100, H), 100);
    }

    #[test]
    fn fractions_earned_between_frequent_asks_add_up() {
        let mut e = Entitlement::default();
        // A quarter unit earned per step: a whole-unit count would never reach one.
        for t in 1..=8 {
            e.note(0, 1, Nanos(t), 250, H);
        }
        assert_eq!(e.owed(Nanos(8), 250, H), 2);
        e.note(2, 2, Nanos(8), 250, H);
        assert_eq!(e.owed(Nanos(8), 250, H), 0);
    }

    #[test]
    fn grants_draw_it_down_and_never_below_nothing() {
        let mut e = Entitlement::default();
        e.note(30, 30, Nanos(500), 100, H);
        assert_eq!(e.owed(Nanos(500), 100, H), 20);
        e.note(500, 500, Nanos(500), 100, H);
        assert_eq!(e.owed(Nanos(500), 100, H), 0);
        e.hand_back(15);
        assert_eq!(e.owed(Nanos(500), 100, H), 15);
    }

    #[test]
    fn short_marks_waiting_until_a_full_grant_or_the_window_passes() {
        let mut e = Entitlement::default();
        e.note(5, 10, Nanos(100), 10, H);
        assert!(e.waiting(Nanos(1_099), H));
        assert!(!e.waiting(Nanos(1_100), H));
        e.note(0, 10, Nanos(2_000), 10, H);
        assert!(e.waiting(Nanos(2_000), H));
        e.note(10, 10, Nanos(2_100), 10, H);
        assert!(!e.waiting(Nanos(2_100), H));
    }

    #[test]
    fn a_step_back_earns_nothing() {
        let mut e = Entitlement::default();
        e.note(100, 100, Nanos(5_000), 100, H);
        assert_eq!(e.owed(Nanos(4_000), 100, H), 0);
        e.note(0, 1, Nanos(4_000), 100, H);
        assert_eq!(e.owed(Nanos(5_500), 100, H), 50);
    }
}
