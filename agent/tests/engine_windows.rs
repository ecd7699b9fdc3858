//! Windows end on UNIX-time boundaries of their length, wherever the agent started.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

const SEC: u64 = 1_000_000_000;

/// A wall clock at `start` plus the nanoseconds stored in the returned cell.
fn wall_at(start: &str) -> (Arc<AtomicI64>, impl Fn() -> jiff::Timestamp + Send + Sync) {
    let base = start.parse::<jiff::Timestamp>().unwrap().as_nanosecond();
    let shift = Arc::new(AtomicI64::new(0));
    let read = Arc::clone(&shift);
    let clock = move || {
        jiff::Timestamp::from_nanosecond(base + i128::from(read.load(Ordering::SeqCst))).unwrap()
    };
    (shift, clock)
}

fn fixed_window(units: u64, per: &str) -> Policy {
    Policy::from_yaml(&format!(
        "id: api\ndimensions: [{{name: tenant}}]\nalgorithm: fixed_window\n\
         rate: {{units: {units}, per: {per}}}\nscope: process\n"
    ))
    .unwrap()
}

fn admit(e: &Engine, now: u64) -> (bool, u64) {
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(now));
    (d.allowed, d.results[0].reset_after_ns)
}

/// An agent started half-way through a second counts that second's rest as one window:
/// 3 per second admit 3 in the aligned second, never 6.
#[test]
fn a_second_window_is_the_unix_second() {
    let (_, clock) = wall_at("2026-03-01T12:00:00.5Z");
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource::from_policies([fixed_window(3, "1s")]))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(admit(&e, 0), (true, SEC / 2), "half a second to the edge");
    }
    assert!(!admit(&e, SEC / 2 - 1).0, "same UNIX second");
    assert!(admit(&e, SEC / 2).0, "the next UNIX second");
}

/// A daily window ends at 00:00 UTC, and its reset counts to it.
#[test]
fn a_day_window_resets_at_midnight_utc() {
    let (_, clock) = wall_at("2026-03-01T23:00:00Z");
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource::from_policies([fixed_window(1, "1d")]))
        .unwrap();
    assert_eq!(admit(&e, 0), (true, 3_600 * SEC));
    let (allowed, reset) = admit(&e, 1_800 * SEC);
    assert_eq!((allowed, reset), (false, 1_800 * SEC));
    assert!(admit(&e, 3_600 * SEC).0, "a new day at midnight");
}

/// envoyproxy/ratelimit rules are windows of their unit, aligned the same way.
#[test]
fn envoy_minute_rules_end_on_the_minute() {
    let config = "domain: edge\ndescriptors:\n  - key: tenant\n    \
                  rate_limit: {unit: minute, requests_per_unit: 2}\n";
    let (_, clock) = wall_at("2026-03-01T12:00:45Z");
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource {
            policies: Vec::new(),
            envoy: Some(EnvoyConfig::from_yaml("edge.yaml", config).unwrap()),
        })
        .unwrap();
    let dims = [Dimension::envoy("edge", &[("tenant", "a")])];
    let req = AdmitRequest::new(&dims);
    assert_eq!(e.admit(&req, Nanos(0)).results[0].reset_after_ns, 15 * SEC);
    assert!(e.admit(&req, Nanos(SEC)).allowed);
    assert!(!e.admit(&req, Nanos(14 * SEC)).allowed);
    assert!(e.admit(&req, Nanos(15 * SEC)).allowed, "12:01:00");
}

/// A stepped wall clock moves windows once the engine re-reads it; a step back never
/// reopens a window already counted.
#[test]
fn windows_follow_a_stepped_wall_clock() {
    let (shift, clock) = wall_at("2026-03-01T12:00:00Z");
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource::from_policies([fixed_window(1, "1m")]))
        .unwrap();
    assert!(admit(&e, 0).0);
    assert!(!admit(&e, SEC).0);
    // This wall clock stands still: read against monotonic zero, it has not moved.
    assert!(!e.sync_unix_time(Nanos(0)), "no step");
    shift.store(30 * SEC as i64, Ordering::SeqCst);
    assert!(e.sync_unix_time(Nanos(0)), "stepped 30 s ahead");
    assert_eq!(e.unix_time(Nanos(SEC)).0 % (60 * SEC), 31 * SEC);
    assert!(!admit(&e, 2 * SEC).0, "12:00:32, the same minute");
    assert!(admit(&e, 30 * SEC).0, "12:01:00 on the stepped clock");
    shift.store(-60 * SEC as i64, Ordering::SeqCst);
    assert!(e.sync_unix_time(Nanos(0)));
    assert!(
        !admit(&e, 31 * SEC).0,
        "stepped back: the minute counted stays spent"
    );
}
