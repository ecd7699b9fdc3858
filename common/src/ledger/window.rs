//! Credit of a fixed window, a sliding window or a calendar period, owned by a ledger.
//!
//! A window's allowance is minted whole when the window opens and lapses when it ends. A
//! lease carries credit of the window it was granted in and never outlives that window (its
//! ttl is cut at the window's end, measured like every lease from the holder's send time and
//! shortened for drift), so a holder stops spending a window's credit before the grantor's
//! timeline reaches the next window, and the next window can open with its whole allowance at
//! once: nothing of the old one can still be spent.
//!
//! Within a window, `free` is the allowance less what was put on lease and not handed back
//! in the same window. Credit handed back after its window ended lapses with it.
//!
//! A sliding window also weighs the previous window's consumption, counted as everything
//! granted in it and not handed back before it ended (at least what was spent), by the part
//! of the previous window still inside the sliding span, exactly as the local sliding window
//! counter does; a grant keeps `current + ⌈previous·(W − e)/W⌉ ≤ limit`. A unit spent later
//! in the window than it was granted meets a smaller weight, so every admission satisfies the
//! counter's condition and the fleet keeps its bound `limit + ⌊limit·T/W⌋`.

use crate::algo::{CalendarPeriod as AlgoPeriod, CalendarSchedule};
use crate::policy::CalendarPeriod;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Longest tail of a window in which no new credit of it is granted: a lease granted then
/// could barely be spent before its holder-side deadline, and its holder would only ask again.
pub const WINDOW_TAIL_MAX_NS: u64 = 250_000_000;

/// The tail of a span of credit `span_ns` long (a window, or an upstream lease's ttl) in
/// which none of it is granted: a tenth of the span, at most [`WINDOW_TAIL_MAX_NS`].
pub fn tail_ns(span_ns: u64) -> u64 {
    (span_ns / 10).min(WINDOW_TAIL_MAX_NS)
}

/// How a policy's allowance comes in windows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WindowSpec {
    /// `limit` per aligned window `[k·W, (k+1)·W)` of the ledger timeline (UNIX time).
    Fixed { window_ns: u64, limit: u64 },
    /// As `Fixed`, with the previous window weighed in as it slides out.
    Sliding { window_ns: u64, limit: u64 },
    /// `limit` per calendar period in the civil time of `zone`.
    Calendar {
        period: CalendarPeriod,
        zone: String,
        limit: u64,
    },
}

impl WindowSpec {
    pub fn limit(&self) -> u64 {
        match self {
            WindowSpec::Fixed { limit, .. }
            | WindowSpec::Sliding { limit, .. }
            | WindowSpec::Calendar { limit, .. } => *limit,
        }
    }

    /// `[start, end)` of the window holding `now`. A calendar period that cannot be
    /// computed (a zone the policy validation let through but the database lost, or a time
    /// outside the calendar's range) is a single window reaching to the end of time, so
    /// nothing is ever minted twice.
    pub fn bounds(&self, now: Nanos) -> (Nanos, Nanos) {
        match self {
            WindowSpec::Fixed { window_ns, .. } | WindowSpec::Sliding { window_ns, .. } => {
                let w = (*window_ns).max(1);
                let start = now.0 - now.0 % w;
                (Nanos(start), Nanos(start.saturating_add(w)))
            }
            WindowSpec::Calendar { period, zone, .. } => {
                calendar_bounds(*period, zone, now).unwrap_or((now, Nanos(u64::MAX)))
            }
        }
    }

    fn slides(&self) -> bool {
        matches!(self, WindowSpec::Sliding { .. })
    }
}

fn calendar_bounds(period: CalendarPeriod, zone: &str, now: Nanos) -> Option<(Nanos, Nanos)> {
    let period = match period {
        CalendarPeriod::Day => AlgoPeriod::Day,
        CalendarPeriod::Week => AlgoPeriod::Week,
        CalendarPeriod::Month => AlgoPeriod::Month,
        CalendarPeriod::Year => AlgoPeriod::Year,
    };
    let schedule = CalendarSchedule::new(period, zone).ok()?;
    let at = jiff::Timestamp::from_nanosecond(i128::from(now.0)).ok()?;
    let (start, end) = schedule.bounds(at).ok()?;
    let ns = |t: jiff::Timestamp| u64::try_from(t.as_nanosecond()).ok();
    Some((Nanos(ns(start)?), Nanos(ns(end)?)))
}

/// One key's window credit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSupply {
    pub spec: WindowSpec,
    /// The current window `[start, end)`.
    pub start: Nanos,
    pub end: Nanos,
    /// Allowance of the current window not on lease or spent.
    pub free: u64,
    /// Sliding windows: what the previous window consumed (0 if it was not the one just
    /// before, or for other windows).
    pub previous: u64,
}

/// Units moved by a window change, for the account's books.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Rolled {
    /// Allowance of the new window.
    pub minted: u64,
    /// Free credit of the window that ended.
    pub lapsed: u64,
}

impl WindowSupply {
    /// The window holding `now`, with its whole allowance free.
    pub fn open(spec: WindowSpec, now: Nanos) -> WindowSupply {
        let (start, end) = spec.bounds(now);
        WindowSupply {
            free: spec.limit(),
            spec,
            start,
            end,
            previous: 0,
        }
    }

    /// Moves to the window holding `now` if the current one has ended.
    pub fn roll(&mut self, now: Nanos) -> Rolled {
        if now < self.end {
            return Rolled::default();
        }
        let (start, end) = self.spec.bounds(now);
        let limit = self.spec.limit();
        let consumed = limit.saturating_sub(self.free);
        self.previous = if self.spec.slides() && start == self.end {
            consumed
        } else {
            0
        };
        let rolled = Rolled {
            minted: limit,
            lapsed: self.free,
        };
        self.start = start;
        self.end = end;
        self.free = limit;
        rolled
    }

    /// Credit that may be granted at `now` (after [`roll`](Self::roll)): the free allowance
    /// less the previous window's sliding weight, and nothing in the window's tail.
    pub fn grantable(&self, now: Nanos) -> u64 {
        if self.end.saturating_since(now) < tail_ns(self.end.saturating_since(self.start)) {
            return 0;
        }
        self.free.saturating_sub(self.previous_weight(now))
    }

    /// Units an exact decision may take at `now` (after [`roll`](Self::roll)): the free
    /// allowance less the previous window's sliding weight. Unlike a grant, a decision is
    /// spent at once, so the window's tail is no reason to refuse it.
    pub fn decidable(&self, now: Nanos) -> u64 {
        self.free.saturating_sub(self.previous_weight(now))
    }

    /// `⌈previous × (end − now) / (end − start)⌉`: the previous window's consumption still
    /// inside the sliding span.
    fn previous_weight(&self, now: Nanos) -> u64 {
        if self.previous == 0 {
            return 0;
        }
        let len = u128::from(self.end.saturating_since(self.start).max(1));
        let left = u128::from(self.end.saturating_since(now));
        let weighted = (u128::from(self.previous) * left).div_ceil(len);
        u64::try_from(weighted).unwrap_or(u64::MAX)
    }

    /// How long until `missing` more units could be granted: for a sliding window, until
    /// the previous window's weight has fallen by that much, if that happens before the
    /// window ends; otherwise until the next window opens.
    pub fn ns_until(&self, missing: u64, now: Nanos) -> u64 {
        let to_end = self.end.saturating_since(now).max(1);
        let weight = self.previous_weight(now);
        if self.previous == 0 || missing > weight {
            return to_end;
        }
        // The weight falls by `previous / len` per nanosecond.
        let len = u128::from(self.end.saturating_since(self.start).max(1));
        let ns = (u128::from(missing) * len).div_ceil(u128::from(self.previous));
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        ns.min(to_end).max(1)
    }

    /// Whether a lease version issued at `issued_at` belongs to the current window.
    pub fn holds(&self, issued_at: Nanos) -> bool {
        issued_at >= self.start && issued_at < self.end
    }

    /// Longest ttl a lease granted at `now` may have: up to the window's end.
    pub fn ttl_cap_ms(&self, now: Nanos) -> u64 {
        self.end.saturating_since(now) / 1_000_000
    }

    /// Nothing of the current window or of the previous one still counts.
    pub fn untouched(&self) -> bool {
        self.free == self.spec.limit() && self.previous == 0
    }

    /// Units consumed in the current window (on lease, spent or written off).
    pub fn consumed(&self) -> u64 {
        self.spec.limit().saturating_sub(self.free)
    }

    /// Takes a new policy version's window, carrying what the current window consumed so
    /// that usage never resets by crossing a version boundary. Returns the change of free
    /// credit as (added, removed).
    pub fn reconfigure(&mut self, spec: WindowSpec, consumed: u64, now: Nanos) -> (u64, u64) {
        let before = self.free;
        let (start, end) = spec.bounds(now);
        if !spec.slides() {
            self.previous = 0;
        }
        self.free = spec.limit().saturating_sub(consumed);
        self.spec = spec;
        self.start = start;
        self.end = end;
        (
            self.free.saturating_sub(before),
            before.saturating_sub(self.free),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn fixed(limit: u64) -> WindowSupply {
        let spec = WindowSpec::Fixed {
            window_ns: 60 * S,
            limit,
        };
        WindowSupply::open(spec, Nanos(125 * S))
    }

    #[test]
    fn windows_align_to_the_timeline_and_open_whole() {
        let mut w = fixed(10);
        assert_eq!((w.start, w.end), (Nanos(120 * S), Nanos(180 * S)));
        w.free = 3;
        assert_eq!(w.roll(Nanos(179 * S)), Rolled::default());
        assert_eq!(
            w.roll(Nanos(185 * S)),
            Rolled {
                minted: 10,
                lapsed: 3
            }
        );
        assert_eq!((w.start, w.free, w.previous), (Nanos(180 * S), 10, 0));
    }

    #[test]
    fn nothing_is_granted_in_the_tail() {
        let w = fixed(10);
        assert_eq!(w.grantable(Nanos(180 * S - WINDOW_TAIL_MAX_NS - 1)), 10);
        assert_eq!(w.grantable(Nanos(180 * S - WINDOW_TAIL_MAX_NS + 1)), 0);
        assert_eq!(w.ttl_cap_ms(Nanos(170 * S)), 10_000);
        let short = WindowSupply::open(
            WindowSpec::Fixed {
                window_ns: S,
                limit: 5,
            },
            Nanos(0),
        );
        assert_eq!(short.grantable(Nanos(899_999_999)), 5);
        assert_eq!(short.grantable(Nanos(900_000_001)), 0);
    }

    #[test]
    fn a_sliding_window_weighs_the_previous_one_as_it_slides_out() {
        let spec = WindowSpec::Sliding {
            window_ns: 10 * S,
            limit: 100,
        };
        let mut w = WindowSupply::open(spec, Nanos(0));
        w.free = 40; // 60 consumed
        w.roll(Nanos(10 * S));
        assert_eq!(w.previous, 60);
        assert_eq!(w.grantable(Nanos(10 * S)), 40);
        assert_eq!(w.grantable(Nanos(15 * S)), 70);
        assert_eq!(w.ns_until(10, Nanos(15 * S)), 1_666_666_667);
        assert_eq!(w.ns_until(50, Nanos(10 * S)), 8_333_333_334);
        // Skipping a whole window forgets the previous one.
        w.roll(Nanos(35 * S));
        assert_eq!((w.previous, w.free), (0, 100));
    }

    #[test]
    fn calendar_days_follow_the_zone() {
        // 2026-03-29 is 23 hours long in Berlin (clocks go forward at 02:00).
        let spec = WindowSpec::Calendar {
            period: CalendarPeriod::Day,
            zone: "Europe/Berlin".into(),
            limit: 7,
        };
        let noon: jiff::Timestamp = "2026-03-29T10:00:00Z".parse().unwrap();
        let w = WindowSupply::open(spec, Nanos(noon.as_nanosecond() as u64));
        assert_eq!(w.end.0 - w.start.0, 23 * 3_600 * S);
        let start: jiff::Timestamp = "2026-03-28T23:00:00Z".parse().unwrap();
        assert_eq!(w.start.0, start.as_nanosecond() as u64);
    }

    #[test]
    fn a_new_version_carries_the_consumption_of_the_window() {
        let mut w = fixed(10);
        w.free = 4;
        let spec = WindowSpec::Fixed {
            window_ns: 3_600 * S,
            limit: 8,
        };
        assert_eq!(w.reconfigure(spec, 6, Nanos(130 * S)), (0, 2));
        assert_eq!((w.free, w.start), (2, Nanos(0)));
    }
}
