//! A policy document survives the binary codec of the allocator's log and snapshots, and
//! its own YAML, whatever its fields hold.

use leasehold_common::policy::{
    Algorithm, Calendar, CalendarPeriod, Concurrency, Cost, CostUnit, Dimension, Enforcement,
    Failure, FailureMode, HumanDuration, LeaseParams, Mode, Policy, PolicySet, PolicySetLimits,
    PolicyVersion, Ppm, PriorityClass, RateSpec, Scope, Shape,
};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    // Printable and awkward characters alike: quotes, colons, newlines, non-ASCII.
    prop_oneof![
        "[a-z0-9_-]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(24).collect()),
    ]
}

fn duration() -> impl Strategy<Value = HumanDuration> {
    prop_oneof![
        any::<u64>().prop_map(HumanDuration::from_ns),
        (0u64..100_000).prop_map(HumanDuration::from_millis),
    ]
}

fn ppm() -> impl Strategy<Value = Ppm> {
    prop_oneof![(0u64..1_000_000).prop_map(Ppm), any::<u64>().prop_map(Ppm)]
}

fn rate() -> impl Strategy<Value = RateSpec> {
    (any::<u64>(), duration()).prop_map(|(units, per)| RateSpec { units, per })
}

fn dimension() -> impl Strategy<Value = Dimension> {
    (
        text(),
        any::<(bool, bool, bool)>(),
        any::<u32>(),
        vec(text(), 0..3),
    )
        .prop_map(
            |(name, (required, lowercase, overflow), max_len, values)| Dimension {
                name,
                required,
                lowercase,
                max_len,
                overflow,
                values,
            },
        )
}

fn cost() -> impl Strategy<Value = Cost> {
    (
        prop_oneof![
            Just(CostUnit::Request),
            Just(CostUnit::Bytes),
            Just(CostUnit::Weighted)
        ],
        any::<u64>(),
        btree_map(text(), any::<u64>(), 0..3),
    )
        .prop_map(|(unit, default, routes)| Cost {
            unit,
            default,
            routes,
        })
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::TokenBucket),
        Just(Algorithm::Gcra),
        Just(Algorithm::FixedWindow),
        Just(Algorithm::SlidingWindow),
        Just(Algorithm::CalendarQuota),
        Just(Algorithm::Concurrency),
    ]
}

fn calendar() -> impl Strategy<Value = Calendar> {
    (
        prop_oneof![
            Just(CalendarPeriod::Day),
            Just(CalendarPeriod::Week),
            Just(CalendarPeriod::Month),
            Just(CalendarPeriod::Year)
        ],
        text(),
        any::<u64>(),
    )
        .prop_map(|(period, time_zone, units)| Calendar {
            period,
            time_zone,
            units,
        })
}

fn scope() -> impl Strategy<Value = Scope> {
    prop_oneof![
        Just(Scope::Global),
        Just(Scope::Region),
        Just(Scope::Cell),
        Just(Scope::Process)
    ]
}

fn failure() -> impl Strategy<Value = Failure> {
    (
        prop_oneof![
            Just(FailureMode::FailClosed),
            Just(FailureMode::CachedLease),
            Just(FailureMode::FailOpen),
            Just(FailureMode::Restricted)
        ],
        option::of(any::<u8>()),
        option::of(rate()),
    )
        .prop_map(|(mode, min_priority, rate)| Failure {
            mode,
            min_priority,
            rate,
        })
}

fn lease() -> impl Strategy<Value = LeaseParams> {
    (
        duration(),
        any::<u64>(),
        option::of(any::<u64>()),
        ppm(),
        duration(),
    )
        .prop_map(
            |(ttl, min_credit, max_credit, reserve_fraction, refresh_horizon)| LeaseParams {
                ttl,
                min_credit,
                max_credit,
                reserve_fraction,
                refresh_horizon,
            },
        )
}

fn priority_class() -> impl Strategy<Value = PriorityClass> {
    (text(), any::<u8>(), any::<u32>(), any::<bool>()).prop_map(
        |(name, priority, weight, borrow)| PriorityClass {
            name,
            priority,
            weight,
            borrow,
        },
    )
}

/// envoyproxy/ratelimit text as people write it (several lines, indentation, comments,
/// quotes), and as it may arrive (any characters, trailing spaces, no final newline).
fn ratelimit() -> impl Strategy<Value = String> {
    prop_oneof![
        vec(text(), 0..4).prop_map(|values| {
            let mut yaml = String::from("# edge\ndomain: edge\ndescriptors:\n");
            for v in values {
                yaml.push_str(&format!(
                    "  - key: tenant\n    value: {v:?}\n    rate_limit: {{unit: minute, requests_per_unit: 5}}\n"
                ));
            }
            yaml
        }),
        vec(text(), 0..4).prop_map(|lines| lines.join("\n")),
        "( *[a-z:#'\"]{0,8} *\n){0,4}",
    ]
}

fn timestamp() -> impl Strategy<Value = jiff::Timestamp> {
    let (min, max) = (jiff::Timestamp::MIN, jiff::Timestamp::MAX);
    (min.as_second()..=max.as_second(), 0i32..1_000_000_000)
        .prop_map(|(s, ns)| jiff::Timestamp::new(s, ns).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

prop_compose! {
    fn policy()(
        (id, description, dimensions, key) in (text(), text(), vec(dimension(), 0..3), vec(text(), 0..3)),
        (cost, algorithm, rate, burst) in (cost(), algorithm(), option::of(rate()), option::of(any::<u64>())),
        (calendar, concurrency, scope) in (
            option::of(calendar()),
            option::of(any::<u64>().prop_map(|max_in_flight| Concurrency { max_in_flight })),
            scope(),
        ),
        (failure, shadow, effective_at, kill_switch) in (failure(), any::<bool>(), option::of(timestamp()), any::<bool>()),
        (exact, shape) in (
            any::<bool>(),
            option::of(any::<u64>().prop_map(|ns| Shape { max_delay: HumanDuration::from_ns(ns) })),
        ),
        (lease, priority_classes) in (lease(), vec(priority_class(), 0..3)),
        ratelimit in option::of(ratelimit()),
    ) -> Policy {
        Policy {
            id, description, dimensions, key, cost, algorithm, rate, burst, calendar, concurrency,
            shape, scope,
            enforcement: if exact { Enforcement::Exact } else { Enforcement::Leased },
            failure,
            mode: if shadow { Mode::Shadow } else { Mode::Enforce },
            effective_at, kill_switch, lease, priority_classes, ratelimit,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_policy_survives_the_binary_codec(
        policy in policy(),
        version in any::<u64>(),
        rolled_back_from in option::of(any::<u64>()),
    ) {
        let stored = PolicyVersion { version, policy, rolled_back_from };
        let bytes = postcard::to_allocvec(&stored).unwrap();
        let back: PolicyVersion = postcard::from_bytes(&bytes).unwrap();
        prop_assert_eq!(back, stored);
    }

    #[test]
    fn every_policy_survives_its_yaml(policy in policy()) {
        let yaml = policy.to_yaml().unwrap();
        let back: Policy = serde_norway::from_str(&yaml)
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        prop_assert_eq!(back, policy);
    }
}

#[test]
fn a_policy_set_with_every_kind_survives_the_binary_codec() {
    let docs = [
        "id: tb\nrate: {units: 5, per: 1s}\nburst: 9\nlease: {reserve_fraction: 0.25, max_credit: 4}\n",
        "id: gcra\nalgorithm: gcra\nrate: {units: 5, per: 1s}\nfailure: {mode: restricted, min_priority: 3, rate: {units: 1, per: 1s}}\n",
        "id: fw\nalgorithm: fixed_window\nrate: {units: 10, per: 1h}\ndescription: \"quotes \\\" and: colons\"\n",
        "id: sw\nalgorithm: sliding_window\nrate: {units: 10, per: 1m}\nmode: shadow\n",
        "id: cq\nalgorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 1000}\n",
        "id: cc\nalgorithm: concurrency\nconcurrency: {max_in_flight: 2}\nscope: process\n",
        "# envoyproxy/ratelimit\ndomain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
    ];
    let mut set = PolicySet::new(PolicySetLimits::default());
    for doc in docs {
        set.apply(Policy::from_yaml(doc).unwrap()).unwrap();
    }
    set.rollback("tb", 1).unwrap_or_else(|e| panic!("{e}"));
    let bytes = postcard::to_allocvec(&set).unwrap();
    let back: PolicySet = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back, set);
    assert_eq!(back.len(), docs.len());
}
