//! Calendar periods in the civil time of an IANA time zone.
//!
//! Every instant has a *label*: its local civil date-time truncated to the period (the
//! minute, the hour, local midnight, the Monday of its week, the first of its month or
//! year). A period is a maximal run of consecutive instants sharing one label. That one
//! rule gives the expected answers everywhere the wall clock jumps:
//!
//! * a day runs from local midnight to local midnight: 23 hours on a spring-forward day,
//!   25 on a fall-back day, and it begins at the end of the gap where midnight is skipped;
//! * weeks start on Monday and months and years follow the calendar, with the same rule;
//! * a wall hour repeated by a fall-back (01:00–02:00 twice) is one two-hour period, since
//!   its label never changes; a repeated minute, whose label does change in between, is
//!   two periods;
//! * half-hour shifts (Australia/Lord_Howe) and offsets with minutes (Asia/Kathmandu)
//!   give periods cut at the shift, never overlapping ones.
//!
//! The periods of a zone therefore partition the timeline: each ends exactly where the
//! next begins.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Span, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// Longest accepted zone name, in bytes (IANA names are well under this).
pub const ZONE_NAME_LEN_MAX: usize = 64;

/// Offset changes one period may span before the zone is refused as malformed. Real zones
/// change offset a few times a year at most.
pub const TRANSITIONS_PER_PERIOD_MAX: usize = 64;

/// Why a calendar quota was refused or a period could not be computed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CalendarError {
    #[error("calendar quota limit must be positive (limit = 0)")]
    ZeroLimit,
    #[error("time zone name {zone:?} is {len} bytes long; at most {max} are allowed")]
    ZoneNameTooLong {
        zone: String,
        len: usize,
        max: usize,
    },
    #[error("unknown time zone {zone:?}: {reason}")]
    UnknownZone { zone: String, reason: String },
    #[error("the {period} holding {at} in time zone {zone:?} is outside the supported range")]
    OutOfRange {
        period: CalendarPeriod,
        at: Timestamp,
        zone: String,
    },
    #[error(
        "the {period} holding {at} in time zone {zone:?} spans more than {max} offset changes"
    )]
    TooManyTransitions {
        period: CalendarPeriod,
        at: Timestamp,
        zone: String,
        max: usize,
    },
}

/// The calendar unit a quota resets on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CalendarPeriod {
    Minute,
    Hour,
    Day,
    /// Monday 00:00 to the next Monday 00:00.
    Week,
    Month,
    Year,
}

impl CalendarPeriod {
    pub fn name(self) -> &'static str {
        match self {
            CalendarPeriod::Minute => "minute",
            CalendarPeriod::Hour => "hour",
            CalendarPeriod::Day => "day",
            CalendarPeriod::Week => "week",
            CalendarPeriod::Month => "month",
            CalendarPeriod::Year => "year",
        }
    }

    /// The civil start of the period holding `dt`.
    fn label(self, dt: DateTime) -> Result<DateTime, jiff::Error> {
        let date = dt.date();
        Ok(match self {
            CalendarPeriod::Minute => date.at(dt.hour(), dt.minute(), 0, 0),
            CalendarPeriod::Hour => date.at(dt.hour(), 0, 0, 0),
            CalendarPeriod::Day => date.at(0, 0, 0, 0),
            CalendarPeriod::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                date.checked_sub(Span::new().days(back))?.at(0, 0, 0, 0)
            }
            CalendarPeriod::Month => date.first_of_month().at(0, 0, 0, 0),
            CalendarPeriod::Year => date.first_of_year().at(0, 0, 0, 0),
        })
    }

    /// The civil start of the period after the one labelled `label`.
    fn next_label(self, label: DateTime) -> Result<DateTime, jiff::Error> {
        match self {
            CalendarPeriod::Minute => label.checked_add(SignedDuration::from_mins(1)),
            CalendarPeriod::Hour => label.checked_add(SignedDuration::from_hours(1)),
            CalendarPeriod::Day => label.checked_add(Span::new().days(1)),
            CalendarPeriod::Week => label.checked_add(Span::new().days(7)),
            CalendarPeriod::Month => label.checked_add(Span::new().months(1)),
            CalendarPeriod::Year => label.checked_add(Span::new().years(1)),
        }
    }
}

impl fmt::Display for CalendarPeriod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A period kind in a validated time zone: computes period bounds.
#[derive(Clone, Debug)]
pub struct CalendarSchedule {
    zone: String,
    tz: TimeZone,
    period: CalendarPeriod,
}

/// Why a bound computation stopped, before the context is attached.
enum Stop {
    Range,
    Transitions,
}

impl From<jiff::Error> for Stop {
    fn from(_: jiff::Error) -> Stop {
        Stop::Range
    }
}

const ONE_NS: SignedDuration = SignedDuration::from_nanos(1);

impl CalendarSchedule {
    /// Looks `zone` up in the bundled IANA database.
    pub fn new(period: CalendarPeriod, zone: &str) -> Result<CalendarSchedule, CalendarError> {
        if zone.len() > ZONE_NAME_LEN_MAX {
            return Err(CalendarError::ZoneNameTooLong {
                zone: zone.to_owned(),
                len: zone.len(),
                max: ZONE_NAME_LEN_MAX,
            });
        }
        let tz = TimeZone::get(zone).map_err(|e| CalendarError::UnknownZone {
            zone: zone.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(CalendarSchedule {
            zone: zone.to_owned(),
            tz,
            period,
        })
    }

    /// The zone name as given.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    pub fn period(&self) -> CalendarPeriod {
        self.period
    }

    /// `[start, end)` of the period holding `ts`: `start ≤ ts < end`, and the period
    /// holding `end` starts at `end`.
    pub fn bounds(&self, ts: Timestamp) -> Result<(Timestamp, Timestamp), CalendarError> {
        let bounds = self.label_at(ts).and_then(|label| {
            let start = self.start(ts, label)?;
            let end = self.end(ts, label)?;
            Ok((start, end))
        });
        bounds.map_err(|stop| match stop {
            Stop::Range => CalendarError::OutOfRange {
                period: self.period,
                at: ts,
                zone: self.zone.clone(),
            },
            Stop::Transitions => CalendarError::TooManyTransitions {
                period: self.period,
                at: ts,
                zone: self.zone.clone(),
                max: TRANSITIONS_PER_PERIOD_MAX,
            },
        })
    }

    fn label_at(&self, ts: Timestamp) -> Result<DateTime, Stop> {
        Ok(self.period.label(self.tz.to_datetime(ts))?)
    }

    /// Walks back through offset changes while the label holds.
    fn start(&self, ts: Timestamp, label: DateTime) -> Result<Timestamp, Stop> {
        let mut cur = ts;
        for _ in 0..=TRANSITIONS_PER_PERIOD_MAX {
            // Where the label begins if the offset at `cur` held all along; `≤ cur`.
            let begins = self.tz.to_offset(cur).to_timestamp(label)?;
            let change = self.tz.preceding(cur.checked_add(ONE_NS)?).next();
            match change.map(|c| c.timestamp()) {
                // The offset changed between `begins` and `cur`: the label holds from
                // the change on, and maybe before it under the old offset.
                Some(at) if begins <= at => {
                    let before = at.checked_sub(ONE_NS)?;
                    if self.label_at(before)? != label {
                        return Ok(at);
                    }
                    cur = before;
                }
                _ => return Ok(begins),
            }
        }
        Err(Stop::Transitions)
    }

    /// Walks forward through offset changes while the label holds.
    fn end(&self, ts: Timestamp, label: DateTime) -> Result<Timestamp, Stop> {
        let next = self.period.next_label(label)?;
        let mut cur = ts;
        for _ in 0..=TRANSITIONS_PER_PERIOD_MAX {
            // Where the next label begins if the offset at `cur` held on; `> cur`.
            let ends = self.tz.to_offset(cur).to_timestamp(next)?;
            match self.tz.following(cur).next().map(|c| c.timestamp()) {
                Some(at) if ends >= at => {
                    if self.label_at(at)? != label {
                        return Ok(at);
                    }
                    cur = at;
                }
                _ => return Ok(ends),
            }
        }
        Err(Stop::Transitions)
    }
}
