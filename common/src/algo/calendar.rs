//! Calendar quotas: `limit` units per calendar period in an IANA time zone.
//!
//! A contractual quota ("10 000 calls per day, Berlin time") resets on the civil calendar,
//! not on a monotonic grid, so this algorithm takes wall-clock [`Timestamp`]s. Periods are
//! computed by [`CalendarSchedule`] (see [`calendar_period`](super::calendar_period) for the
//! rules around DST gaps and folds); at most `limit` units are admitted in each period.
//!
//! # Wall-clock steps (P3)
//!
//! Wall clocks step backwards (NTP corrections, operator mistakes). The quota keeps the
//! latest timestamp seen and treats an earlier reading as that latest one: the charge is
//! counted in the current period, a finished period never reopens, and nothing is refunded.
//! Such readings are counted in [`rollbacks`](CalendarQuota::rollbacks). A step forward
//! cannot be told from real time passing and is honoured; guard the wall clock upstream
//! if that matters.
//!
//! Deciding is cheap: the period bounds are computed once per period, at the first
//! decision after it starts.

use super::calendar_period::{CalendarError, CalendarPeriod, CalendarSchedule};
use super::Decision;
use crate::time::RollbackStats;
use jiff::Timestamp;

/// Calendar quota state.
#[derive(Clone, Debug)]
pub struct CalendarQuota {
    schedule: CalendarSchedule,
    limit: u64,
    used: u64,
    /// `[start, end)` of the period `used` belongs to; `None` before the first decision.
    current: Option<(Timestamp, Timestamp)>,
    /// Latest timestamp seen; earlier readings are treated as this.
    latest: Option<Timestamp>,
    rollbacks: RollbackStats,
}

impl CalendarQuota {
    /// `limit` units per `period` in the IANA time zone named `zone`.
    pub fn new(
        limit: u64,
        period: CalendarPeriod,
        zone: &str,
    ) -> Result<CalendarQuota, CalendarError> {
        if limit == 0 {
            return Err(CalendarError::ZeroLimit);
        }
        Ok(CalendarQuota {
            schedule: CalendarSchedule::new(period, zone)?,
            limit,
            used: 0,
            current: None,
            latest: None,
            rollbacks: RollbackStats::default(),
        })
    }

    /// This quota with `used` units charged in `period` (`[start, end)`) as of `now`, if
    /// `period` is the one holding `now` in this quota's schedule: state carried across a
    /// restart. `None` when the period has ended or the schedule puts it elsewhere (another
    /// period length or time zone), where the quota starts afresh. Never more than the
    /// limit is counted as used.
    pub fn resumed(
        mut self,
        used: u64,
        period: (Timestamp, Timestamp),
        now: Timestamp,
    ) -> Option<CalendarQuota> {
        if self.schedule.bounds(now).ok()? != period {
            return None;
        }
        self.current = Some(period);
        self.latest = Some(now);
        self.used = used.min(self.limit);
        Some(self)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn schedule(&self) -> &CalendarSchedule {
        &self.schedule
    }

    /// Units charged in the current period.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// `[start, end)` of the current period, once a decision has been made.
    pub fn current_period(&self) -> Option<(Timestamp, Timestamp)> {
        self.current
    }

    /// Latest timestamp seen.
    pub fn latest(&self) -> Option<Timestamp> {
        self.latest
    }

    /// Readings that were behind the latest one, and by how much in total.
    pub fn rollbacks(&self) -> RollbackStats {
        self.rollbacks
    }

    /// `[start, end)` of the period holding `ts` (for tests and `RateLimit` headers).
    pub fn period_bounds(&self, ts: Timestamp) -> Result<(Timestamp, Timestamp), CalendarError> {
        self.schedule.bounds(ts)
    }

    /// Charges `cost` at wall time `now` if this period's quota allows it; otherwise
    /// changes nothing but the latest time seen. `retry_after_ns` is the time from the
    /// effective `now` (after clamping) to the next period's start, or `u64::MAX` when the
    /// cost exceeds the limit. If the period cannot be computed (timestamps at the edge of
    /// the supported calendar) the cost is denied, never admitted.
    pub fn try_take(&mut self, cost: u64, now: Timestamp) -> Decision {
        let now = self.observe(now);
        let Some((_, end)) = self.roll_to(now) else {
            return Decision::Deny {
                remaining: 0,
                retry_after_ns: u64::MAX,
            };
        };
        let remaining = self.limit - self.used;
        if cost <= remaining {
            self.used += cost;
            return Decision::Admit {
                remaining: remaining - cost,
            };
        }
        let retry_after_ns = if cost > self.limit {
            u64::MAX
        } else {
            ns_between(now, end)
        };
        Decision::Deny {
            remaining,
            retry_after_ns,
        }
    }

    /// Returns units charged in the current period (the rollback of a multi-dimensional
    /// admission). A charge in a finished period is not returned, and never more than the
    /// period has used.
    pub fn refund(&mut self, cost: u64, charged_at: Timestamp) {
        if let Some((start, end)) = self.current {
            if start <= charged_at && charged_at < end {
                self.used -= cost.min(self.used);
            }
        }
    }

    /// Clamps `now` to the latest reading, counting readings that were behind it.
    fn observe(&mut self, now: Timestamp) -> Timestamp {
        match self.latest {
            Some(latest) if now < latest => {
                self.rollbacks.rollbacks += 1;
                self.rollbacks.rollback_ns = self
                    .rollbacks
                    .rollback_ns
                    .saturating_add(ns_between(now, latest));
                latest
            }
            _ => {
                self.latest = Some(now);
                now
            }
        }
    }

    /// Moves to the period holding `now` (never backwards, as `now` never is), starting it
    /// from zero if it is new. `None` if the period cannot be computed.
    fn roll_to(&mut self, now: Timestamp) -> Option<(Timestamp, Timestamp)> {
        if let Some((start, end)) = self.current {
            if now < end {
                return Some((start, end));
            }
        }
        let bounds = self.schedule.bounds(now).ok()?;
        self.current = Some(bounds);
        self.used = 0;
        Some(bounds)
    }
}

/// Nanoseconds from `from` to `to`, zero if `to` is earlier, saturating at `u64::MAX`.
fn ns_between(from: Timestamp, to: Timestamp) -> u64 {
    let ns = to.as_nanosecond() - from.as_nanosecond();
    u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn resumed_only_in_the_same_period_of_the_same_schedule() {
        let mut q = CalendarQuota::new(3, CalendarPeriod::Hour, "UTC").unwrap();
        assert!(q.try_take(2, ts("2024-05-01T10:15:00Z")).is_admit());
        let period = q.current_period().unwrap();
        let fresh = CalendarQuota::new(3, CalendarPeriod::Hour, "UTC").unwrap();
        let mut r = fresh
            .clone()
            .resumed(2, period, ts("2024-05-01T10:30:00Z"))
            .unwrap();
        assert_eq!(r.used(), 2);
        assert!(r.try_take(1, ts("2024-05-01T10:31:00Z")).is_admit());
        assert!(!r.try_take(1, ts("2024-05-01T10:32:00Z")).is_admit());
        assert!(fresh
            .clone()
            .resumed(2, period, ts("2024-05-01T11:00:00Z"))
            .is_none());
        let day = CalendarQuota::new(3, CalendarPeriod::Day, "UTC").unwrap();
        assert!(day.resumed(2, period, ts("2024-05-01T10:30:00Z")).is_none());
        let capped = fresh
            .resumed(9, period, ts("2024-05-01T10:30:00Z"))
            .unwrap();
        assert_eq!(capped.used(), 3, "never more than the limit");
    }

    #[test]
    fn admits_limit_then_denies_until_next_period() {
        let mut q = CalendarQuota::new(3, CalendarPeriod::Hour, "UTC").unwrap();
        for left in [2, 1, 0] {
            assert_eq!(
                q.try_take(1, ts("2024-05-01T10:15:00Z")),
                Decision::Admit { remaining: left }
            );
        }
        assert_eq!(
            q.try_take(1, ts("2024-05-01T10:59:59.5Z")),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 500_000_000
            }
        );
        assert_eq!(
            q.try_take(1, ts("2024-05-01T11:00:00Z")),
            Decision::Admit { remaining: 2 }
        );
    }

    #[test]
    fn weighted_cost_above_limit_and_refund() {
        let mut q = CalendarQuota::new(10, CalendarPeriod::Day, "Europe/Berlin").unwrap();
        let at = ts("2024-05-01T08:00:00Z");
        assert_eq!(q.try_take(7, at), Decision::Admit { remaining: 3 });
        assert_eq!(
            q.try_take(11, at),
            Decision::Deny {
                remaining: 3,
                retry_after_ns: u64::MAX
            }
        );
        // Berlin is UTC+2 in May: the day ends at 22:00 UTC.
        assert_eq!(
            q.try_take(4, at),
            Decision::Deny {
                remaining: 3,
                retry_after_ns: 14 * 3_600 * 1_000_000_000
            }
        );
        q.refund(5, at);
        assert_eq!(q.used(), 2);
        q.refund(50, at);
        assert_eq!(q.used(), 0);
        assert!(q.try_take(1, ts("2024-05-02T08:00:00Z")).is_admit());
        q.refund(1, at);
        assert_eq!(q.used(), 1, "a finished period's charge is not returned");
    }

    #[test]
    fn backward_step_counts_in_the_latest_period() {
        let mut q = CalendarQuota::new(2, CalendarPeriod::Day, "UTC").unwrap();
        assert!(q.try_take(1, ts("2024-05-02T00:00:00Z")).is_admit());
        // Back into yesterday: counted today, yesterday does not reopen.
        assert!(q.try_take(1, ts("2024-05-01T23:00:00Z")).is_admit());
        assert_eq!(
            q.try_take(1, ts("2024-05-01T12:00:00Z")),
            Decision::Deny {
                remaining: 0,
                retry_after_ns: 24 * 3_600 * 1_000_000_000
            }
        );
        assert_eq!(
            q.rollbacks(),
            RollbackStats {
                rollbacks: 2,
                rollback_ns: 13 * 3_600 * 1_000_000_000
            }
        );
        assert_eq!(q.latest(), Some(ts("2024-05-02T00:00:00Z")));
    }

    #[test]
    fn refused_configurations_name_the_problem() {
        assert_eq!(
            CalendarQuota::new(0, CalendarPeriod::Day, "UTC").unwrap_err(),
            CalendarError::ZeroLimit
        );
        let err = CalendarQuota::new(1, CalendarPeriod::Day, "Mars/Olympus_Mons").unwrap_err();
        assert!(
            matches!(err, CalendarError::UnknownZone { ref zone, .. } if zone == "Mars/Olympus_Mons")
        );
        assert!(err.to_string().contains("Mars/Olympus_Mons"), "{err}");
        let long = "A".repeat(65);
        assert!(matches!(
            CalendarQuota::new(1, CalendarPeriod::Day, &long).unwrap_err(),
            CalendarError::ZoneNameTooLong {
                len: 65,
                max: 64,
                ..
            }
        ));
    }

    #[test]
    fn edge_of_the_calendar_fails_closed() {
        let mut q = CalendarQuota::new(5, CalendarPeriod::Year, "UTC").unwrap();
        let d = q.try_take(1, Timestamp::MAX);
        assert_eq!(
            d,
            Decision::Deny {
                remaining: 0,
                retry_after_ns: u64::MAX
            }
        );
    }
}
