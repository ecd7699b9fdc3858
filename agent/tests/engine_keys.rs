//! Bounded key state (P4): an attacker spraying identities cannot grow the key table past
//! `keys_max`, and invalid identities share the policy's overflow key.

use leasehold_agent::engine::{
    AdmitRequest, DenyReason, Dimension, Engine, EngineLimits, Outcome, RuleSource,
};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;

const KEYS_MAX: usize = 1_000;
const IDLE_NS: u64 = 1_000_000_000;

fn engine(shards: usize) -> Engine {
    let policy = Policy::from_yaml(
        "id: api\ndimensions: [{name: user, required: true, max_len: 32, overflow: true}]\n\
         rate: {units: 1, per: 1h}\nburst: 1000000\nscope: process\n",
    )
    .unwrap();
    Engine::builder()
        .limits(EngineLimits {
            keys_max: KEYS_MAX,
            shards,
            key_idle_ns: IDLE_NS,
            ..EngineLimits::default()
        })
        .build(RuleSource::from_policies([policy]))
        .unwrap()
}

fn admit_user(e: &Engine, user: &str, now: u64) -> (Outcome, u64) {
    let entries = [("user", user)];
    let dims = [Dimension::policy("api", &entries)];
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(now));
    (d.results[0].outcome, d.results[0].remaining)
}

#[test]
fn sprayed_identities_never_grow_the_table_past_keys_max() {
    let e = engine(16);
    let mut overflow_remaining = None;
    for i in 0..100_000u64 {
        // Every tenth identity is invalid: too long, or carrying a control character.
        let user = match i % 10 {
            0 => format!("{i:0>40}"),
            5 => format!("user\n{i}"),
            _ => format!("user-{i}"),
        };
        let (outcome, remaining) = admit_user(&e, &user, i);
        assert_eq!(outcome, Outcome::Admitted, "identity {i}");
        if i % 5 == 0 {
            // Invalid identities all spend from the one overflow key (so do valid ones
            // once the table is full, hence "at least one less").
            if let Some(prev) = overflow_remaining {
                assert!(remaining < prev, "identity {i} spent elsewhere");
            }
            overflow_remaining = Some(remaining);
        }
        assert!(e.key_count() <= KEYS_MAX, "table grew to {}", e.key_count());
    }
    let s = e.stats();
    assert!(s.keys <= KEYS_MAX);
    assert!(
        s.keys_max <= KEYS_MAX && s.keys_max > KEYS_MAX - 16,
        "split over 16 shards"
    );
    assert!(
        s.table_full > 0,
        "no keys at rest to drop: valid identities overflowed too"
    );
    let overflowed = 20_000 + s.table_full;
    let last = admit_user(&e, "\u{7}", 100_000).1;
    assert_eq!(
        last,
        1_000_000 - overflowed - 1,
        "every overflow hit one key"
    );
}

#[test]
fn keys_at_rest_make_room_for_new_ones() {
    // One shard, so the table holds exactly `keys_max` keys. One unit per hour: a key
    // that spent one unit is whole again an hour later.
    const HOUR_NS: u64 = 3_600_000_000_000;
    let e = engine(1);
    for i in 0..KEYS_MAX as u64 {
        admit_user(&e, &format!("a{i}"), 0);
    }
    assert_eq!(e.key_count(), KEYS_MAX);
    for i in 0..KEYS_MAX as u64 {
        admit_user(&e, &format!("b{i}"), HOUR_NS);
    }
    let s = e.stats();
    assert_eq!(
        s.evictions, KEYS_MAX as u64,
        "keys at rest were dropped on demand"
    );
    assert_eq!(s.keys, KEYS_MAX);
    assert_eq!(s.table_full, 0, "room was always found");
    // A swept key starts again with its whole burst, which it had anyway.
    let held = e.key_count();
    assert_eq!(e.sweep(Nanos(3 * HOUR_NS)), held);
    assert_eq!(e.key_count(), 0);
    assert_eq!(admit_user(&e, "a0", 3 * HOUR_NS).1, 999_999);
}

#[test]
fn a_required_identity_without_overflow_is_refused() {
    let policy = Policy::from_yaml(
        "id: strict\ndimensions: [{name: user, required: true}]\nrate: {units: 1, per: 1s}\nscope: process\n",
    )
    .unwrap();
    let e = Engine::builder()
        .build(RuleSource::from_policies([policy]))
        .unwrap();
    let dims = [Dimension::policy("strict", &[])];
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(0));
    assert!(!d.allowed);
    assert_eq!(d.results[0].outcome, Outcome::InvalidKey);
    assert_eq!(d.denial.unwrap().reason, DenyReason::InvalidKey);
    assert_eq!(e.key_count(), 0, "no state for refused keys");
    assert_eq!(e.stats().policies[0].counters.rejected, 1);
}
