//! Window and calendar budgets in a networked run: the policy's algorithm as its YAML says
//! it, and the windows the run's checker counts admissions in.
//!
//! The checker works the windows out on its own, from the UNIX time on the grantor's
//! timeline: fixed and sliding windows as `t / W`, calendar days with the time-zone
//! database, not with the ledger's window code, so a ledger that put a boundary in the wrong
//! place would be caught rather than agreed with.

use jiff::Timestamp;

/// Longest window a run may have: windows far longer than the longest run would never
/// end inside one.
pub const WINDOW_MS_MAX: u64 = 3_600_000;
/// Shortest window: the ledger refuses leased windows shorter than a second.
pub const WINDOW_MS_MIN: u64 = 1_000;
/// Largest limit per window.
pub const LIMIT_MAX: u64 = 1_000_000_000;

/// A window or calendar budget the run's policy has instead of a token bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Window {
    /// `limit` per window `[k·W, (k+1)·W)` of UNIX time, `W` = `window_ms`.
    Fixed { window_ms: u64, limit: u64 },
    /// As `Fixed`, with the previous window's consumption weighed in as it slides out.
    Sliding { window_ms: u64, limit: u64 },
    /// `limit` per calendar day of time zone `zone` (23 or 25 hours where its clocks change).
    CalendarDay { zone: String, limit: u64 },
}

impl Window {
    pub fn limit(&self) -> u64 {
        match self {
            Window::Fixed { limit, .. }
            | Window::Sliding { limit, .. }
            | Window::CalendarDay { limit, .. } => *limit,
        }
    }

    /// The policy's `algorithm`.
    pub fn algorithm(&self) -> &'static str {
        match self {
            Window::Fixed { .. } => "fixed_window",
            Window::Sliding { .. } => "sliding_window",
            Window::CalendarDay { .. } => "calendar_quota",
        }
    }

    /// The window length of a fixed or sliding window, in nanoseconds.
    pub fn window_ns(&self) -> Option<u64> {
        match self {
            Window::Fixed { window_ms, .. } | Window::Sliding { window_ms, .. } => {
                Some(window_ms.saturating_mul(1_000_000))
            }
            Window::CalendarDay { .. } => None,
        }
    }

    /// The policy's algorithm and budget lines.
    pub fn policy_yaml(&self) -> String {
        match self {
            Window::Fixed { window_ms, limit } | Window::Sliding { window_ms, limit } => format!(
                "algorithm: {}\nrate: {{units: {limit}, per: {window_ms}ms}}\n",
                self.algorithm()
            ),
            Window::CalendarDay { zone, limit } => format!(
                "algorithm: calendar_quota\ncalendar: {{period: day, time_zone: {zone}, units: {limit}}}\n"
            ),
        }
    }

    /// `[start, end)` of the window holding `unix_ns`, in UNIX nanoseconds; None when the
    /// calendar cannot say (a zone the database does not know, a date out of its range).
    pub fn bounds(&self, unix_ns: u64) -> Option<(u64, u64)> {
        match self {
            Window::Fixed { .. } | Window::Sliding { .. } => {
                let w = self.window_ns()?.max(1);
                let start = unix_ns - unix_ns % w;
                Some((start, start.checked_add(w)?))
            }
            Window::CalendarDay { zone, .. } => calendar_day(zone, unix_ns),
        }
    }

    /// Rejects a window the ledger would refuse or a run could not use.
    pub fn validate(&self) -> Result<(), (&'static str, u64, &'static str)> {
        if !(1..=LIMIT_MAX).contains(&self.limit()) {
            return Err(("window.limit", self.limit(), "must be from 1 to 10^9"));
        }
        match self {
            Window::Fixed { window_ms, .. } | Window::Sliding { window_ms, .. } => {
                if !(WINDOW_MS_MIN..=WINDOW_MS_MAX).contains(window_ms) {
                    return Err((
                        "window.window_ms",
                        *window_ms,
                        "must be from 1000 (a second) to 3600000 (an hour)",
                    ));
                }
                Ok(())
            }
            Window::CalendarDay { zone, .. } => match jiff::tz::db().get(zone) {
                Ok(_) => Ok(()),
                Err(_) => Err(("window.zone", 0, "must name a time zone the database knows")),
            },
        }
    }
}

/// The calendar day of `zone` holding `unix_ns`: from the start of its date to the start of
/// the next date, each the first instant of that date the zone's clocks show (01:00 where
/// they skip midnight).
fn calendar_day(zone: &str, unix_ns: u64) -> Option<(u64, u64)> {
    let at = Timestamp::from_nanosecond(i128::from(unix_ns)).ok()?;
    let date = at.in_tz(zone).ok()?.date();
    let ns = |d: jiff::civil::Date| -> Option<u64> {
        u64::try_from(d.in_tz(zone).ok()?.timestamp().as_nanosecond()).ok()
    };
    let (start, end) = (ns(date)?, ns(date.tomorrow().ok()?)?);
    (start <= unix_ns && unix_ns < end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn unix_ns(text: &str) -> u64 {
        let t: Timestamp = text.parse().unwrap();
        t.as_nanosecond() as u64
    }

    #[test]
    fn fixed_windows_are_aligned_to_unix_time() {
        let w = Window::Fixed {
            window_ms: 10_000,
            limit: 5,
        };
        assert_eq!(w.bounds(25 * S), Some((20 * S, 30 * S)));
        assert_eq!(w.bounds(30 * S), Some((30 * S, 40 * S)));
        assert!(w.policy_yaml().contains("per: 10000ms"));
    }

    #[test]
    fn a_santiago_day_that_skips_midnight_starts_at_the_change() {
        // Chile's clocks go from 24:00 on 5 September 2026 to 01:00 on the 6th (04:00 UTC).
        let w = Window::CalendarDay {
            zone: "America/Santiago".into(),
            limit: 5,
        };
        let change = unix_ns("2026-09-06T04:00:00Z");
        let before = w.bounds(change - 1).unwrap();
        let after = w.bounds(change).unwrap();
        assert_eq!(before, (unix_ns("2026-09-05T04:00:00Z"), change));
        assert_eq!(after, (change, unix_ns("2026-09-07T03:00:00Z")));
        assert_eq!((after.1 - after.0) / S, 23 * 3_600);
    }

    #[test]
    fn the_policy_the_run_applies_is_leased_with_its_window() {
        use leasehold_common::ledger::{PolicyParams, WindowSpec};
        use leasehold_common::policy::{CalendarPeriod, Policy};
        let cases = [
            (
                Window::Fixed {
                    window_ms: 10_000,
                    limit: 7,
                },
                WindowSpec::Fixed {
                    window_ns: 10 * S,
                    limit: 7,
                },
            ),
            (
                Window::Sliding {
                    window_ms: 10_000,
                    limit: 7,
                },
                WindowSpec::Sliding {
                    window_ns: 10 * S,
                    limit: 7,
                },
            ),
            (
                Window::CalendarDay {
                    zone: "America/Santiago".into(),
                    limit: 7,
                },
                WindowSpec::Calendar {
                    period: CalendarPeriod::Day,
                    zone: "America/Santiago".into(),
                    limit: 7,
                },
            ),
        ];
        for (window, spec) in cases {
            let cfg = super::super::NetConfig {
                window: Some(window),
                ..super::super::NetConfig::quick_cluster()
            };
            let policy = Policy::from_yaml(&cfg.policy_yaml()).unwrap();
            let params = PolicyParams::from_policy(&policy, 1).unwrap();
            assert_eq!(params.window, Some(spec));
        }
    }

    #[test]
    fn unknown_zones_and_short_windows_are_refused() {
        let zone = Window::CalendarDay {
            zone: "Mars/Olympus".into(),
            limit: 5,
        };
        assert_eq!(zone.validate().unwrap_err().0, "window.zone");
        let short = Window::Sliding {
            window_ms: 500,
            limit: 5,
        };
        assert_eq!(short.validate().unwrap_err().0, "window.window_ms");
    }
}
