//! Calendar quotas across DST, odd offsets and wall-clock steps.

use jiff::{SignedDuration, Timestamp};
use leasehold_common::algo::{CalendarPeriod, CalendarQuota, CalendarSchedule, Decision};
use proptest::prelude::*;

const HOUR_NS: u64 = 3_600_000_000_000;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn bounds(period: CalendarPeriod, zone: &str, at: &str) -> (Timestamp, Timestamp) {
    CalendarSchedule::new(period, zone)
        .unwrap()
        .bounds(ts(at))
        .unwrap()
}

fn hours(b: (Timestamp, Timestamp)) -> i64 {
    let len = b.1.duration_since(b.0);
    assert_eq!(
        len.as_nanos() % 3_600_000_000_000,
        0,
        "{b:?} is not whole hours"
    );
    len.as_hours()
}

#[test]
fn new_york_days_are_23_and_25_hours_on_dst_days() {
    use CalendarPeriod::Day;
    let spring = bounds(Day, "America/New_York", "2024-03-10T12:00:00-04:00");
    assert_eq!(
        spring,
        (ts("2024-03-10T05:00:00Z"), ts("2024-03-11T04:00:00Z"))
    );
    assert_eq!(hours(spring), 23);
    // Both sides of the skipped hour belong to the same day.
    assert_eq!(
        bounds(Day, "America/New_York", "2024-03-10T06:59:59.999999999Z"),
        spring
    );
    assert_eq!(
        bounds(Day, "America/New_York", "2024-03-10T07:00:00Z"),
        spring
    );

    let fall = bounds(Day, "America/New_York", "2024-11-03T12:00:00-05:00");
    assert_eq!(
        fall,
        (ts("2024-11-03T04:00:00Z"), ts("2024-11-04T05:00:00Z"))
    );
    assert_eq!(hours(fall), 25);
    // Both passes through 01:30 belong to the same day.
    assert_eq!(
        bounds(Day, "America/New_York", "2024-11-03T01:30:00-04:00"),
        fall
    );
    assert_eq!(
        bounds(Day, "America/New_York", "2024-11-03T01:30:00-05:00"),
        fall
    );
}

#[test]
fn berlin_days_are_23_and_25_hours_on_dst_days() {
    use CalendarPeriod::Day;
    let spring = bounds(Day, "Europe/Berlin", "2024-03-31T12:00:00+02:00");
    assert_eq!(
        spring,
        (ts("2024-03-30T23:00:00Z"), ts("2024-03-31T22:00:00Z"))
    );
    assert_eq!(hours(spring), 23);
    let fall = bounds(Day, "Europe/Berlin", "2024-10-27T12:00:00+01:00");
    assert_eq!(
        fall,
        (ts("2024-10-26T22:00:00Z"), ts("2024-10-27T23:00:00Z"))
    );
    assert_eq!(hours(fall), 25);
}

#[test]
fn day_quota_resets_exactly_at_local_midnight() {
    let mut q = CalendarQuota::new(3, CalendarPeriod::Day, "America/New_York").unwrap();
    // Spring-forward day: filled at its first instant, refused until its last.
    assert!(q.try_take(3, ts("2024-03-10T00:00:00-05:00")).is_admit());
    assert_eq!(
        q.try_take(1, ts("2024-03-10T23:00:00-04:00")),
        Decision::Deny {
            remaining: 0,
            retry_after_ns: HOUR_NS
        }
    );
    assert_eq!(hours(q.current_period().unwrap()), 23);
    assert!(!q
        .try_take(1, ts("2024-03-10T23:59:59.999999999-04:00"))
        .is_admit());
    assert_eq!(
        q.try_take(1, ts("2024-03-11T00:00:00-04:00")),
        Decision::Admit { remaining: 2 }
    );

    // Fall-back day: the quota lasts 25 hours and resets 1 ns after its last instant.
    let mut q = CalendarQuota::new(3, CalendarPeriod::Day, "America/New_York").unwrap();
    assert!(q.try_take(3, ts("2024-11-03T00:00:00-04:00")).is_admit());
    assert!(!q.try_take(1, ts("2024-11-03T01:30:00-05:00")).is_admit());
    assert_eq!(
        q.try_take(1, ts("2024-11-03T23:59:59.999999999-05:00")),
        Decision::Deny {
            remaining: 0,
            retry_after_ns: 1
        }
    );
    assert_eq!(hours(q.current_period().unwrap()), 25);
    assert!(q.try_take(3, ts("2024-11-04T00:00:00-05:00")).is_admit());
}

#[test]
fn weeks_start_on_monday_and_months_follow_the_calendar() {
    use CalendarPeriod::{Month, Week, Year};
    // 2024-03-10 is a Sunday: its week began Monday 4 March and lost an hour.
    let week = bounds(Week, "America/New_York", "2024-03-10T12:00:00-04:00");
    assert_eq!(
        week,
        (ts("2024-03-04T05:00:00Z"), ts("2024-03-11T04:00:00Z"))
    );
    assert_eq!(hours(week), 7 * 24 - 1);
    assert_eq!(
        bounds(Week, "America/New_York", "2024-03-11T00:00:00-04:00").0,
        week.1
    );

    let march = bounds(Month, "America/New_York", "2024-03-15T00:00:00Z");
    assert_eq!(
        march,
        (ts("2024-03-01T05:00:00Z"), ts("2024-04-01T04:00:00Z"))
    );
    assert_eq!(hours(march), 31 * 24 - 1);
    let february = bounds(Month, "UTC", "2024-02-29T23:59:59Z");
    assert_eq!(hours(february), 29 * 24);
    let november = bounds(Month, "Europe/Berlin", "2024-11-30T23:30:00+01:00");
    assert_eq!(
        november,
        (ts("2024-10-31T23:00:00Z"), ts("2024-11-30T23:00:00Z"))
    );

    let year = bounds(Year, "America/New_York", "2024-07-01T00:00:00Z");
    assert_eq!(
        year,
        (ts("2024-01-01T05:00:00Z"), ts("2025-01-01T05:00:00Z"))
    );
    assert_eq!(hours(year), 366 * 24);
}

#[test]
fn hours_and_minutes_around_dst_changes() {
    use CalendarPeriod::{Hour, Minute};
    let ny = "America/New_York";
    // Spring forward: 01:00 EST is followed directly by 03:00 EDT.
    assert_eq!(
        bounds(Hour, ny, "2024-03-10T01:30:00-05:00"),
        (ts("2024-03-10T06:00:00Z"), ts("2024-03-10T07:00:00Z"))
    );
    assert_eq!(
        bounds(Hour, ny, "2024-03-10T03:00:00-04:00"),
        (ts("2024-03-10T07:00:00Z"), ts("2024-03-10T08:00:00Z"))
    );
    // Fall back: the wall hour 01 is lived twice and is one two-hour period.
    let repeated = (ts("2024-11-03T05:00:00Z"), ts("2024-11-03T07:00:00Z"));
    assert_eq!(bounds(Hour, ny, "2024-11-03T01:10:00-04:00"), repeated);
    assert_eq!(bounds(Hour, ny, "2024-11-03T01:50:00-05:00"), repeated);
    // …but a repeated minute is two periods, an hour apart.
    assert_eq!(
        bounds(Minute, ny, "2024-11-03T01:30:10-04:00"),
        (ts("2024-11-03T05:30:00Z"), ts("2024-11-03T05:31:00Z"))
    );
    assert_eq!(
        bounds(Minute, ny, "2024-11-03T01:30:10-05:00"),
        (ts("2024-11-03T06:30:00Z"), ts("2024-11-03T06:31:00Z"))
    );
}

#[test]
fn odd_offsets_and_skipped_midnights() {
    use CalendarPeriod::{Day, Hour};
    // Lord Howe moves its clocks by 30 minutes: 02:00 +10:30 becomes 02:30 +11:00, so
    // the wall hour 02 lasts 30 minutes.
    assert_eq!(
        bounds(Hour, "Australia/Lord_Howe", "2024-10-06T02:45:00+11:00"),
        (ts("2024-10-05T15:30:00Z"), ts("2024-10-05T16:00:00Z"))
    );
    assert_eq!(
        bounds(Hour, "Australia/Lord_Howe", "2024-10-06T01:45:00+10:30"),
        (ts("2024-10-05T14:30:00Z"), ts("2024-10-05T15:30:00Z"))
    );
    // Kathmandu is UTC+05:45: its hours start at a quarter past in UTC.
    assert_eq!(
        bounds(Hour, "Asia/Kathmandu", "2024-05-01T10:00:00Z"),
        (ts("2024-05-01T09:15:00Z"), ts("2024-05-01T10:15:00Z"))
    );
    // São Paulo once skipped midnight: that day began at 01:00 and lasted 23 hours.
    let day = bounds(Day, "America/Sao_Paulo", "2015-10-18T12:00:00-02:00");
    assert_eq!(
        day,
        (ts("2015-10-18T03:00:00Z"), ts("2015-10-19T02:00:00Z"))
    );
    assert_eq!(
        bounds(Day, "America/Sao_Paulo", "2015-10-17T12:00:00-03:00").1,
        day.0
    );
}

#[test]
fn backward_wall_step_inside_a_period_does_not_reset_it() {
    let mut q = CalendarQuota::new(2, CalendarPeriod::Day, "Europe/Berlin").unwrap();
    assert!(q.try_take(1, ts("2024-10-27T10:00:00+01:00")).is_admit());
    // The wall clock steps back to yesterday evening: counted today.
    assert!(q.try_take(1, ts("2024-10-26T21:00:00+02:00")).is_admit());
    assert_eq!(
        q.try_take(1, ts("2024-10-26T20:00:00+02:00")),
        Decision::Deny {
            remaining: 0,
            retry_after_ns: 14 * HOUR_NS
        }
    );
    assert_eq!(q.rollbacks().rollbacks, 2);
    // After midnight, stepping back before it does not reopen the finished day.
    assert!(q.try_take(2, ts("2024-10-28T00:00:00+01:00")).is_admit());
    assert!(!q.try_take(1, ts("2024-10-27T23:00:00+01:00")).is_admit());
    assert_eq!(
        q.current_period().unwrap().0,
        ts("2024-10-27T23:00:00Z"),
        "the current period is still the new day"
    );
}

const ZONES: [&str; 7] = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "America/Sao_Paulo",
    "America/Santiago",
];

const PERIODS: [CalendarPeriod; 6] = [
    CalendarPeriod::Minute,
    CalendarPeriod::Hour,
    CalendarPeriod::Day,
    CalendarPeriod::Week,
    CalendarPeriod::Month,
    CalendarPeriod::Year,
];

/// 1970 to 2040, nanosecond resolution.
fn instant() -> impl Strategy<Value = Timestamp> {
    (0i64..2_208_988_800, 0i32..1_000_000_000).prop_map(|(s, ns)| Timestamp::new(s, ns).unwrap())
}

/// Wall readings around DST changes: forward steps of up to two days, one in eight
/// stepping back by up to a day.
fn wall_steps() -> impl Strategy<Value = Vec<(bool, i64, u64)>> {
    prop::collection::vec(
        (
            prop::bool::weighted(0.125),
            0i64..172_800_000_000_000,
            0u64..5,
        ),
        1..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    /// Periods tile the timeline: each holds its instant, ends where the next starts and
    /// starts where the previous ends.
    #[test]
    fn periods_partition_the_timeline(at in instant(), zone in 0..ZONES.len(), period in 0..PERIODS.len()) {
        let sched = CalendarSchedule::new(PERIODS[period], ZONES[zone]).unwrap();
        let (start, end) = sched.bounds(at).unwrap();
        prop_assert!(start <= at && at < end, "{at} not in [{start}, {end})");
        prop_assert_eq!(sched.bounds(end).unwrap().0, end);
        prop_assert_eq!(sched.bounds(start).unwrap(), (start, end));
        let before = start.checked_sub(SignedDuration::from_nanos(1)).unwrap();
        prop_assert_eq!(sched.bounds(before).unwrap().1, start);
        if PERIODS[period] == CalendarPeriod::Day {
            let len = end.duration_since(start).as_mins();
            prop_assert!((22 * 60..=26 * 60).contains(&len), "day of {len} minutes");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// No period admits more than the limit, whatever the wall clock does, and readings
    /// that step back decide exactly as the latest reading would.
    #[test]
    fn quota_holds_per_period_through_wall_steps(
        start in instant(),
        zone in 0..ZONES.len(),
        period in 1..PERIODS.len(),
        limit in 1u64..6,
        steps in wall_steps(),
    ) {
        let mut q = CalendarQuota::new(limit, PERIODS[period], ZONES[zone]).unwrap();
        let mut steady = q.clone();
        let (mut now, mut latest) = (start, Timestamp::MIN);
        let mut per_period: Vec<((Timestamp, Timestamp), u64)> = Vec::new();
        for (back, step_ns, cost) in steps {
            let step = SignedDuration::from_nanos(if back { -step_ns / 2 } else { step_ns });
            now = now.checked_add(step).unwrap();
            latest = latest.max(now);
            let d = q.try_take(cost, now);
            prop_assert_eq!(d, steady.try_take(cost, latest));
            if d.is_admit() {
                let bounds = q.period_bounds(latest).unwrap();
                prop_assert_eq!(Some(bounds), q.current_period());
                match per_period.last_mut() {
                    Some((b, used)) if *b == bounds => *used += cost,
                    _ => per_period.push((bounds, cost)),
                }
            }
        }
        for (bounds, used) in per_period {
            prop_assert!(used <= limit, "{used} > {limit} in {bounds:?}");
        }
    }
}
