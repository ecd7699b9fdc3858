//! Every local limiter's state taken out of one engine and put back into another started
//! later on another monotonic origin, as a standalone agent's restart does through its
//! state file: the restarted engine refuses what the state says it must and admits what
//! it may; a changed policy or a state whose effect has ended starts afresh.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource, SavedLimiter};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;

const SEC: u64 = 1_000_000_000;

/// An engine whose monotonic zero is `wall` (RFC 3339), with one policy `api`.
fn engine(policy: &str, wall: &str) -> Engine {
    let wall: jiff::Timestamp = wall.parse().unwrap();
    let yaml = format!("id: api\ndimensions: [{{name: tenant}}]\nscope: process\n{policy}");
    Engine::builder()
        .wall_clock(move || wall)
        .build(RuleSource::from_policies([
            Policy::from_yaml(&yaml).unwrap()
        ]))
        .unwrap()
}

/// Requests of cost 1 for tenant `a` at `now` until one is refused (at most 100): how
/// many were admitted.
fn admits(e: &Engine, now: Nanos) -> u64 {
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    (0..100)
        .take_while(|_| e.admit(&AdmitRequest::new(&dims), now).allowed)
        .count() as u64
}

fn take(e: &Engine, n: u64, now: Nanos) {
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    for _ in 0..n {
        assert!(e.admit(&AdmitRequest::new(&dims), now).allowed);
    }
}

/// `taken` units spent at the first engine's start (`before`), then its state put into an
/// engine of `after_policy` started at `after`: how many were put back, and how many that
/// one admits at its start.
fn restart(
    policy: &str,
    before: &str,
    taken: u64,
    after_policy: &str,
    after: &str,
) -> (usize, u64) {
    let first = engine(policy, before);
    take(&first, taken, Nanos(SEC));
    let saved: Vec<SavedLimiter> = first.saved_limiters(Nanos::ZERO, Nanos(2 * SEC));
    assert_eq!(saved.len(), 1, "{saved:?}");
    let second = engine(after_policy, after);
    let restored = second.restore_limiters(saved, Nanos(5 * SEC));
    (restored, admits(&second, Nanos(5 * SEC)))
}

const T0: &str = "2026-03-01T10:00:30Z";

#[test]
fn a_fixed_window_keeps_its_count_within_the_window() {
    let p = "algorithm: fixed_window\nrate: {units: 5, per: 1h}\n";
    assert_eq!(restart(p, T0, 3, p, "2026-03-01T10:40:00Z"), (1, 2));
    assert_eq!(
        restart(p, T0, 3, p, "2026-03-01T11:00:00Z"),
        (0, 5),
        "window ended"
    );
    let longer = "algorithm: fixed_window\nrate: {units: 5, per: 2h}\n";
    assert_eq!(restart(p, T0, 3, longer, "2026-03-01T10:40:00Z"), (0, 5));
    let lower = "algorithm: fixed_window\nrate: {units: 2, per: 1h}\n";
    assert_eq!(
        restart(p, T0, 3, lower, "2026-03-01T10:40:00Z"),
        (1, 0),
        "over the limit"
    );
}

#[test]
fn a_sliding_window_keeps_both_counts() {
    let p = "algorithm: sliding_window\nrate: {units: 8, per: 1m}\n";
    assert_eq!(restart(p, T0, 8, p, "2026-03-01T10:00:50Z"), (1, 0));
    // 10:01:15 - 5 s (the second engine decides at its 5th second): 10 s into the next
    // minute, ⌈8 × 50/60⌉ = 7 of the previous minute's 8 still count.
    assert_eq!(restart(p, T0, 8, p, "2026-03-01T10:01:05Z"), (1, 1));
    assert_eq!(
        restart(p, T0, 8, p, "2026-03-01T10:01:55Z"),
        (0, 8),
        "slid out"
    );
    let other = "algorithm: sliding_window\nrate: {units: 8, per: 2m}\n";
    assert_eq!(restart(p, T0, 8, other, "2026-03-01T10:00:50Z"), (0, 8));
}

#[test]
fn a_calendar_quota_keeps_its_period_use() {
    let p = "algorithm: calendar_quota\ncalendar: {period: month, units: 4}\n";
    assert_eq!(restart(p, T0, 3, p, "2026-03-20T08:00:00Z"), (1, 1));
    assert_eq!(restart(p, T0, 4, p, "2026-03-31T23:59:00Z"), (1, 0));
    assert_eq!(
        restart(p, T0, 4, p, "2026-04-01T00:00:00Z"),
        (0, 4),
        "a new month"
    );
    let berlin =
        "algorithm: calendar_quota\ncalendar: {period: month, units: 4, time_zone: Europe/Berlin}\n";
    assert_eq!(restart(p, T0, 4, berlin, "2026-03-20T08:00:00Z"), (0, 4));
    let more = "algorithm: calendar_quota\ncalendar: {period: month, units: 10}\n";
    assert_eq!(
        restart(p, T0, 4, more, "2026-03-20T08:00:00Z"),
        (1, 6),
        "use, not limit"
    );
}

#[test]
fn a_token_bucket_keeps_its_credit_and_refills_over_the_downtime() {
    let p = "algorithm: token_bucket\nrate: {units: 1, per: 1m}\nburst: 4\n";
    // Spent at 10:00:31; the second engine decides at +5 s.
    assert_eq!(restart(p, T0, 4, p, "2026-03-01T10:00:40Z"), (1, 0));
    assert_eq!(
        restart(p, T0, 4, p, "2026-03-01T10:01:30Z"),
        (1, 1),
        "a minute earned one"
    );
    assert_eq!(restart(p, T0, 4, p, "2026-03-01T10:03:27Z"), (1, 3));
    assert_eq!(
        restart(p, T0, 4, p, "2026-03-01T10:04:30Z"),
        (0, 4),
        "full again"
    );
    let other = "algorithm: token_bucket\nrate: {units: 1, per: 1m}\nburst: 5\n";
    assert_eq!(restart(p, T0, 4, other, "2026-03-01T10:00:40Z"), (0, 5));
}

#[test]
fn a_gcra_limiter_keeps_its_schedule() {
    let p = "algorithm: gcra\nrate: {units: 1, per: 1m}\nburst: 4\n";
    assert_eq!(restart(p, T0, 4, p, "2026-03-01T10:00:40Z"), (1, 0));
    assert_eq!(restart(p, T0, 4, p, "2026-03-01T10:01:30Z"), (1, 1));
    assert_eq!(
        restart(p, T0, 4, p, "2026-03-01T10:04:30Z"),
        (0, 4),
        "full again"
    );
    let other = "algorithm: gcra\nrate: {units: 2, per: 1m}\nburst: 4\n";
    assert_eq!(restart(p, T0, 4, other, "2026-03-01T10:00:40Z"), (0, 4));
}

/// A wall clock stepped back across the restart: no time counts as passed, nothing is
/// refilled or reopened.
#[test]
fn a_clock_behind_the_save_refills_nothing() {
    let p = "algorithm: token_bucket\nrate: {units: 1, per: 1s}\nburst: 4\n";
    assert_eq!(restart(p, T0, 4, p, "2026-03-01T09:00:00Z"), (1, 0));
    let g = "algorithm: gcra\nrate: {units: 1, per: 1s}\nburst: 4\n";
    assert_eq!(restart(g, T0, 4, g, "2026-03-01T09:00:00Z"), (1, 0));
}

/// Concurrency keeps nothing: the requests in flight ended with the process.
#[test]
fn concurrency_saves_nothing() {
    let e = engine(
        "algorithm: concurrency\nconcurrency: {max_in_flight: 2}\n",
        T0,
    );
    take(&e, 1, Nanos(SEC));
    assert_eq!(e.saved_limiters(Nanos::ZERO, Nanos(2 * SEC)), []);
}

/// Only keys used since the given time are taken; a state with no effect left is not.
#[test]
fn only_recent_keys_with_an_effect_are_taken() {
    let e = engine(
        "algorithm: token_bucket\nrate: {units: 1, per: 1s}\nburst: 4\n",
        T0,
    );
    take(&e, 2, Nanos(SEC));
    assert_eq!(e.saved_limiters(Nanos::ZERO, Nanos(2 * SEC)).len(), 1);
    assert_eq!(e.saved_limiters(Nanos(2 * SEC), Nanos(2 * SEC)), []);
    assert_eq!(
        e.saved_limiters(Nanos::ZERO, Nanos(3 * SEC)),
        [],
        "full again"
    );
}
