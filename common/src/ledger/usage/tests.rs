use super::*;
use proptest::prelude::*;

const HOUR: u64 = USAGE_BUCKET_NS;

fn who(policy: &str, key: &str, holder: &str) -> UsageSubject {
    UsageSubject {
        policy_id: policy.into(),
        key: key.into(),
        holder_id: holder.into(),
    }
}

fn admitted(n: u64) -> UsageCounts {
    UsageCounts {
        admitted: n,
        ..UsageCounts::default()
    }
}

fn query<'a>(policy: &'a str, since_ns: u64, until_ns: u64) -> UsageQuery<'a> {
    UsageQuery {
        policy_id: policy,
        key: None,
        since_ns,
        until_ns,
        per_holder: false,
        rows_max: 1_000,
    }
}

#[test]
fn units_land_in_the_hour_of_their_report_and_ranges_round_outward() {
    let mut book = UsageBook::default();
    book.record(Nanos(10 * HOUR + 5), &who("p", "k", "a"), &admitted(3));
    book.record(Nanos(11 * HOUR), &who("p", "k", "a"), &admitted(4));
    book.record(Nanos(12 * HOUR - 1), &who("p", "k", "b"), &admitted(5));

    let hour10 = book.query(&query("p", 10 * HOUR, 11 * HOUR));
    assert_eq!(hour10.total.admitted, 3);
    let hour11 = book.query(&query("p", 11 * HOUR, 12 * HOUR));
    assert_eq!(hour11.total.admitted, 9);
    // Half an hour in either direction covers the whole buckets it touches.
    let around = book.query(&query("p", 10 * HOUR + HOUR / 2, 11 * HOUR + 1));
    assert_eq!((around.since_ns, around.until_ns), (10 * HOUR, 12 * HOUR));
    assert_eq!(around.total.admitted, 12);
    assert_eq!(around.rows.len(), 1, "per key, holders summed");
}

#[test]
fn rows_are_per_key_or_per_holder_and_other_policies_stay_out() {
    let mut book = UsageBook::default();
    book.record(Nanos(HOUR), &who("p", "k1", "a"), &admitted(1));
    book.record(Nanos(HOUR), &who("p", "k1", "b"), &admitted(2));
    book.record(Nanos(HOUR), &who("p", "k2", "a"), &admitted(4));
    book.record(Nanos(HOUR), &who("pp", "k1", "a"), &admitted(8));
    book.record(Nanos(HOUR), &who("o", "k1", "a"), &admitted(16));

    let per_key = book.query(&query("p", 0, 2 * HOUR));
    let keys: Vec<_> = per_key
        .rows
        .iter()
        .map(|r| (r.key.as_str(), r.counts.admitted))
        .collect();
    assert_eq!(keys, [("k1", 3), ("k2", 4)]);

    let mut q = query("p", 0, 2 * HOUR);
    q.per_holder = true;
    q.key = Some("k1");
    let per_holder = book.query(&q);
    let rows: Vec<_> = per_holder
        .rows
        .iter()
        .map(|r| (r.holder_id.as_str(), r.counts.admitted))
        .collect();
    assert_eq!(rows, [("a", 1), ("b", 2)]);
    assert_eq!(per_holder.total.admitted, 3);
}

#[test]
fn a_key_with_no_rows_finds_none_whatever_its_neighbours() {
    let mut book = UsageBook::default();
    book.record(
        Nanos(HOUR),
        &who("cq", "cq:tenant=acme", "gw-a"),
        &admitted(9),
    );
    book.record(
        Nanos(HOUR),
        &who("cq", "cq:tenant=zeta", "gw-a"),
        &admitted(1),
    );
    for key in ["cq:tenant=other", "cq:tenant=", "cq:tenant=acme2", "a", "z"] {
        let mut q = query("cq", 0, 2 * HOUR);
        q.key = Some(key);
        let r = book.query(&q);
        assert_eq!((r.rows.len(), r.total.admitted), (0, 0), "{key}: {r:?}");
    }
}

#[test]
fn a_repeated_or_reordered_report_adds_no_holder_counts() {
    let mut book = UsageBook::default();
    let live = |_| true;
    let c = |refused, fail_open| HolderCounts {
        refused,
        shaped: 0,
        fail_open,
    };
    assert_eq!(book.holder_growth(7, c(5, 1), live), c(5, 1));
    assert_eq!(book.holder_growth(7, c(5, 1), live), c(0, 0));
    assert_eq!(book.holder_growth(7, c(3, 0), live), c(0, 0));
    assert_eq!(book.holder_growth(7, c(9, 1), live), c(4, 0));
    // Another lease counts from zero.
    assert_eq!(book.holder_growth(8, c(2, 2), live), c(2, 2));
    book.forget_lease(7);
    assert_eq!(book.marks_len(), 1);
}

#[test]
fn retention_drops_whole_old_buckets_and_their_rows() {
    let mut book = UsageBook::new(UsageLimits {
        retention_hours: 2,
        rows_max: 100,
    });
    for h in 0..5 {
        book.record(Nanos(h * HOUR), &who("p", "k", "a"), &admitted(1));
    }
    assert_eq!(book.rows_len(), 5);
    // At 5h, buckets ending after 3h are kept: those of 3h and 4h.
    book.prune(Nanos(5 * HOUR));
    assert_eq!(book.rows_len(), 2);
    let all = book.query(&query("p", 0, 10 * HOUR));
    assert_eq!(all.total.admitted, 2);
    assert_eq!(all.oldest_kept_ns, 3 * HOUR);
}

#[test]
fn rows_past_the_cap_are_counted_in_their_policy_overflow() {
    let mut book = UsageBook::new(UsageLimits {
        retention_hours: 24,
        rows_max: 2,
    });
    book.record(Nanos(0), &who("p", "k1", "a"), &admitted(1));
    book.record(Nanos(0), &who("p", "k2", "a"), &admitted(2));
    book.record(Nanos(0), &who("p", "k3", "a"), &admitted(4));
    book.record(Nanos(0), &who("p", "k1", "a"), &admitted(8));
    assert_eq!((book.rows_len(), book.overflow_rows()), (2, 1));
    let r = book.query(&query("p", 0, HOUR));
    assert_eq!(r.overflow.admitted, 4);
    assert_eq!(r.total.admitted, 15, "totals stay whole");
    assert_eq!(r.rows.len(), 2);
}

#[test]
fn units_taken_back_leave_the_row_they_were_booked_in() {
    let mut book = UsageBook::new(UsageLimits {
        retention_hours: 24,
        rows_max: 1,
    });
    book.record(Nanos(HOUR), &who("p", "k1", ""), &admitted(5));
    book.record(Nanos(HOUR), &who("p", "k2", ""), &admitted(4));
    // Taken back from the hour of the decision, however late the refund arrives.
    assert_eq!(book.take_back(Nanos(HOUR + 10), &who("p", "k1", ""), 2), 2);
    assert_eq!(
        book.take_back(Nanos(HOUR), &who("p", "k2", ""), 9),
        4,
        "from the overflow"
    );
    assert_eq!(book.take_back(Nanos(3 * HOUR), &who("p", "k1", ""), 1), 0);
    let r = book.query(&query("p", 0, 2 * HOUR));
    assert_eq!((r.total.admitted, r.overflow.admitted), (3, 0));
}

#[test]
fn a_row_limit_truncates_rows_but_not_the_total() {
    let mut book = UsageBook::default();
    for k in 0..5 {
        book.record(Nanos(0), &who("p", &format!("k{k}"), "a"), &admitted(1));
    }
    let mut q = query("p", 0, HOUR);
    q.rows_max = 2;
    let r = book.query(&q);
    assert!(r.truncated);
    assert_eq!((r.rows.len(), r.total.admitted), (2, 5));
}

proptest! {
    /// Whatever order, repetition or loss reports of cumulative counts arrive in, the
    /// growth booked per lease is the highest count any arriving report stated.
    #[test]
    fn holder_counts_are_booked_once(
        reports in proptest::collection::vec((0u64..4, 0u64..50, 0u64..50), 1..60)
    ) {
        let mut book = UsageBook::default();
        let mut booked: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut highest: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (lease, refused, fail_open) in reports {
            let c = HolderCounts { refused, shaped: 0, fail_open };
            let g = book.holder_growth(lease, c, |_| true);
            let b = booked.entry(lease).or_default();
            *b = (b.0 + g.refused, b.1 + g.fail_open);
            let h = highest.entry(lease).or_default();
            *h = (h.0.max(refused), h.1.max(fail_open));
        }
        prop_assert_eq!(booked, highest);
    }

    /// Rows stored never exceed the cap, and every unit recorded in a kept bucket is in a
    /// query's total (per key or in the overflow).
    #[test]
    fn totals_survive_the_row_cap(
        records in proptest::collection::vec((0u64..6, 0u64..3, 1u64..100), 1..80),
        rows_max in 1usize..10,
    ) {
        let mut book = UsageBook::new(UsageLimits { retention_hours: 48, rows_max });
        let mut sum = 0;
        for (key, hour, units) in records {
            book.record(Nanos(hour * HOUR), &who("p", &format!("k{key}"), "a"), &admitted(units));
            sum += units;
            prop_assert!(book.rows_len() <= rows_max);
        }
        let r = book.query(&query("p", 0, 3 * HOUR));
        prop_assert_eq!(r.total.admitted, sum);
    }
}
