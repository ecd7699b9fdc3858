//! A full key table never forgets consumption that still counts: a key is dropped only
//! once a fresh state would answer as it does (its window ended, its bucket is full
//! again); until then new keys spend from the policy's overflow key, counted.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, EngineLimits, RuleSource};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;

const KEYS_MAX: usize = 1_000;
const SEC: u64 = 1_000_000_000;
const IDLE_NS: u64 = SEC;
/// The engine starts at 2026-03-01T12:00:00Z: twelve hours to the end of the day window.
const TO_MIDNIGHT_NS: u64 = 12 * 3_600 * SEC;

fn engine(policy: &str) -> Engine {
    let policy = Policy::from_yaml(&format!(
        "id: api\ndimensions: [{{name: user, required: true}}]\nscope: process\n{policy}"
    ))
    .unwrap();
    let start = "2026-03-01T12:00:00Z".parse::<jiff::Timestamp>().unwrap();
    Engine::builder()
        .wall_clock(move || start)
        .limits(EngineLimits {
            keys_max: KEYS_MAX,
            // One shard: the table holds exactly `keys_max` keys.
            shards: 1,
            key_idle_ns: IDLE_NS,
            ..EngineLimits::default()
        })
        .build(RuleSource::from_policies([policy]))
        .unwrap()
}

fn daily() -> Engine {
    engine("algorithm: fixed_window\nrate: {units: 1, per: 1d}\n")
}

fn admit(e: &Engine, user: &str, now: u64) -> bool {
    let entries = [("user", user)];
    let dims = [Dimension::policy("api", &entries)];
    e.admit(&AdmitRequest::new(&dims), Nanos(now)).allowed
}

/// Fills the table with users who each spent their one request of the day.
fn spend_all(e: &Engine, now: u64) {
    for i in 0..KEYS_MAX {
        assert!(admit(e, &format!("a{i}"), now), "a{i}'s first request");
    }
    assert_eq!(e.key_count(), KEYS_MAX);
}

#[test]
fn idle_keys_with_consumption_in_their_window_are_not_forgotten() {
    let e = daily();
    spend_all(&e, 0);
    // Long past the idle time, new users arrive and the sweep runs: nobody's day is over.
    let later = 100 * IDLE_NS;
    for i in 0..KEYS_MAX {
        admit(&e, &format!("b{i}"), later);
    }
    assert_eq!(e.sweep(Nanos(later)), 0, "nothing may be forgotten");
    for i in 0..KEYS_MAX {
        assert!(!admit(&e, &format!("a{i}"), later), "a{i} spent its day");
    }
    let s = e.stats();
    assert_eq!(s.evictions, 0);
    assert_eq!(s.keys, KEYS_MAX);
}

#[test]
fn new_keys_of_a_table_full_of_live_keys_share_the_overflow_key_counted() {
    let e = daily();
    spend_all(&e, 0);
    let later = 100 * IDLE_NS;
    let admitted = (0..KEYS_MAX)
        .filter(|i| admit(&e, &format!("b{i}"), later))
        .count();
    assert_eq!(admitted, 1, "one overflow key, one request a day");
    let s = e.stats();
    assert_eq!(s.table_full, KEYS_MAX as u64, "every new key counted");
    assert_eq!(s.keys, KEYS_MAX, "the table did not grow");
}

#[test]
fn keys_whose_window_ended_make_room() {
    let e = daily();
    spend_all(&e, 0);
    // The next UTC day: every old key is at rest.
    for i in 0..KEYS_MAX {
        assert!(
            admit(&e, &format!("b{i}"), TO_MIDNIGHT_NS),
            "b{i} has a key"
        );
    }
    let s = e.stats();
    assert_eq!(s.table_full, 0, "room was found");
    assert_eq!(s.evictions, KEYS_MAX as u64);
    // b0 spent its own day, not a shared one.
    assert!(!admit(&e, "b0", TO_MIDNIGHT_NS + 1));
    assert!(admit(&e, "a0", TO_MIDNIGHT_NS + 1), "a new day for a0");
}

#[test]
fn a_bucket_is_forgotten_only_once_full_again() {
    // 10 per second, burst 10: a spent unit is back after 100 ms.
    let e = engine("rate: {units: 10, per: 1s}\nburst: 10\n");
    for i in 0..KEYS_MAX {
        assert!(admit(&e, &format!("a{i}"), 0));
    }
    // Not yet full: only 50 ms of refill (and used too recently anyway).
    assert_eq!(e.sweep(Nanos(50_000_000)), 0);
    // Full again, and unused for longer than the idle time: gone.
    assert_eq!(e.sweep(Nanos(2 * IDLE_NS)), KEYS_MAX);
    assert_eq!(e.key_count(), 0);
}

#[test]
fn a_drained_bucket_keeps_its_key_until_refilled() {
    // One per hour, burst 2: a drained key needs two hours to be whole.
    let e = engine("rate: {units: 1, per: 1h}\nburst: 2\n");
    assert!(admit(&e, "alice", 0));
    assert!(admit(&e, "alice", 0));
    assert!(!admit(&e, "alice", 1));
    assert_eq!(e.sweep(Nanos(3_600 * SEC)), 0, "one unit back, not two");
    assert!(admit(&e, "alice", 3_600 * SEC), "the hour's unit");
    assert!(!admit(&e, "alice", 3_600 * SEC + 1), "and no more");
    assert_eq!(e.sweep(Nanos(3 * 3_600 * SEC + 1)), 1, "whole again");
}
