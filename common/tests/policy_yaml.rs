//! Policy documents: parsing, defaults and YAML round trips.

use leasehold_common::policy::{
    Algorithm, CalendarPeriod, CostUnit, FailureMode, HumanDuration, Mode, Policy, PolicyError,
    Ppm, Scope,
};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/policy/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn full_example_parses_to_the_written_values() {
    let p = Policy::from_yaml(&fixture("tenant-api.yaml")).unwrap();
    assert_eq!(p.id, "tenant-api");
    assert_eq!(p.dimensions.len(), 2);
    assert!(p.dimensions[0].required && p.dimensions[0].lowercase && p.dimensions[0].overflow);
    assert_eq!(p.dimensions[1].values, ["/v1/items", "/v1/search"]);
    assert_eq!(p.key, ["tenant", "route"]);
    assert_eq!(p.cost.unit, CostUnit::Weighted);
    assert_eq!(p.cost.routes["/v1/search"], 5);
    assert_eq!(p.cost.of(Some("/v1/search"), None), 5);
    assert_eq!(p.cost.of(Some("/v1/other"), None), 1);
    assert_eq!(p.algorithm, Algorithm::TokenBucket);
    let rate = p.rate.unwrap().to_rate().unwrap();
    assert_eq!((rate.units(), rate.period_ns()), (100, 1_000_000_000));
    assert_eq!(p.burst(), Some(200));
    assert_eq!(p.capacity(), Some(200));
    assert_eq!(p.scope, Scope::Global);
    assert_eq!(p.failure.mode, FailureMode::CachedLease);
    assert_eq!(p.mode, Mode::Enforce);
    assert_eq!(p.effective_at.unwrap().to_string(), "2026-12-01T00:00:00Z");
    assert_eq!(p.lease.ttl, HumanDuration::from_secs(10));
    assert_eq!(p.lease.max_credit, Some(100));
    assert_eq!(p.lease.reserve_fraction, Ppm(100_000));
    assert_eq!(p.lease.refresh_horizon, HumanDuration::from_secs(2));
    assert_eq!(p.priority_classes.len(), 2);
    assert!(p.priority_classes[1].borrow);
    let order: Vec<&str> = p.key_dimensions().map(|d| d.name.as_str()).collect();
    assert_eq!(order, ["tenant", "route"]);
}

#[test]
fn minimal_policy_gets_documented_defaults() {
    let p = Policy::from_yaml("id: tiny\nrate: { units: 5, per: 500ms }\n").unwrap();
    assert_eq!(p.algorithm, Algorithm::TokenBucket);
    assert_eq!(p.burst, None);
    assert_eq!(p.burst(), Some(5), "default burst is one period's worth");
    assert_eq!(p.cost.unit, CostUnit::Request);
    assert_eq!(p.cost.default, 1);
    assert_eq!(p.scope, Scope::Global);
    assert_eq!(p.failure.mode, FailureMode::CachedLease);
    assert_eq!(p.mode, Mode::Enforce);
    assert!(!p.kill_switch);
    assert_eq!(p.lease.ttl, HumanDuration::from_secs(10));
    assert_eq!(p.lease.min_credit, 1);
    assert_eq!(p.lease.reserve_fraction, Ppm(100_000));
    assert_eq!(p.rate.unwrap().per.as_ns(), 500_000_000);
}

#[test]
fn costs_follow_the_unit() {
    let bytes = Policy::from_yaml(
        "id: b
rate: {units: 1000000, per: 1s}
cost: {unit: bytes, default: 4096}
",
    )
    .unwrap();
    assert_eq!(bytes.cost.of(Some("/upload"), Some(1500)), 1500);
    assert_eq!(
        bytes.cost.of(None, None),
        4096,
        "unknown size costs the default"
    );
    assert_eq!(bytes.cost.of(None, Some(0)), 1, "an empty body is not free");
    let request = Policy::from_yaml(
        "id: r
rate: {units: 10, per: 1s}
cost: {default: 2}
",
    )
    .unwrap();
    assert_eq!(request.cost.of(Some("/v1/search"), Some(99)), 2);
}

#[test]
fn calendar_and_restricted_examples_parse() {
    let q = Policy::from_yaml(&fixture("monthly-quota.yaml")).unwrap();
    let cal = q.calendar.as_ref().unwrap();
    assert_eq!(cal.period, CalendarPeriod::Month);
    assert_eq!(cal.time_zone, "Europe/Berlin");
    assert_eq!(q.capacity(), Some(1_000_000));
    assert_eq!(q.lease.reserve_fraction, Ppm(50_000), "\"5%\" is 0.05");
    assert_eq!(q.failure.mode, FailureMode::FailClosed);

    let r = Policy::from_yaml(&fixture("emergency.yaml")).unwrap();
    assert_eq!(r.algorithm, Algorithm::Gcra);
    assert_eq!(r.failure.mode, FailureMode::Restricted);
    assert_eq!(r.failure.min_priority, Some(5));
    assert_eq!(r.mode, Mode::Shadow);
    assert_eq!(r.priority_classes[0].weight, 1);
}

#[test]
fn yaml_round_trip_is_exact() {
    for name in ["tenant-api.yaml", "monthly-quota.yaml", "emergency.yaml"] {
        let p = Policy::from_yaml(&fixture(name)).unwrap();
        let text = p.to_yaml().unwrap();
        let back = Policy::from_yaml(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        assert_eq!(back, p, "{name} round trip:\n{text}");
        assert_eq!(back.to_yaml().unwrap(), text, "{name}: writing is stable");
    }
}

#[test]
fn fractions_round_trip_without_float_drift() {
    for (written, ppm) in [
        ("0.1", 100_000),
        ("0.3", 300_000),
        ("0.000001", 1),
        ("0.999999", 999_999),
        ("0", 0),
        ("\"33.3333%\"", 333_333),
    ] {
        let text =
            format!("id: f\nrate: {{units: 1, per: 1s}}\nlease: {{reserve_fraction: {written}}}\n");
        let p = Policy::from_yaml(&text).unwrap_or_else(|e| panic!("{written}: {e}"));
        assert_eq!(p.lease.reserve_fraction, Ppm(ppm), "{written}");
        let back = Policy::from_yaml(&p.to_yaml().unwrap()).unwrap();
        assert_eq!(
            back.lease.reserve_fraction,
            Ppm(ppm),
            "{written} written back"
        );
    }
}

fn yaml_error(text: &str) -> String {
    match Policy::from_yaml(text) {
        Err(PolicyError::Yaml(message)) => message,
        other => panic!("expected a YAML error, got {other:?}"),
    }
}

#[test]
fn unknown_fields_are_refused_everywhere_with_their_path() {
    let top = yaml_error("id: a\nrate: {units: 1, per: 1s}\nbrust: 3\n");
    assert!(top.contains("unknown field `brust`"), "{top}");

    let nested = yaml_error("id: a\nrate: {units: 1, per: 1s}\nlease: {tll: 1s}\n");
    assert!(nested.contains("lease: unknown field `tll`"), "{nested}");

    let in_list =
        yaml_error("id: a\nrate: {units: 1, per: 1s}\ndimensions: [{name: t, lower: true}]\n");
    assert!(
        in_list.contains("dimensions[0]: unknown field `lower`"),
        "{in_list}"
    );

    for block in [
        "cost: {unit: request, weight: 2}",
        "calendar: {period: day, units: 1, tz: UTC}",
        "failure: {mode: fail_open, rate_limit: 1}",
        "rate: {units: 1, per: 1s, burst: 2}",
        "concurrency: {max: 1}",
        "priority_classes: [{name: a, priority: 1, share: 2}]",
    ] {
        let message = yaml_error(&format!("id: a\n{block}\n"));
        assert!(message.contains("unknown field"), "{block}: {message}");
    }
}

#[test]
fn bad_scalars_name_their_field() {
    let cases = [
        (
            "id: a\nrate: {units: 1, per: 1sec}\n",
            "rate.per: '1sec' has unknown unit 'sec'",
        ),
        ("id: a\nrate: {units: 1, per: 10}\n", "rate.per"),
        ("id: a\nrate: {units: -1, per: 1s}\n", "rate.units"),
        (
            "id: a\nalgorithm: leaky\nrate: {units: 1, per: 1s}\n",
            "algorithm: unknown variant `leaky`",
        ),
        (
            "id: a\nrate: {units: 1, per: 1s}\nlease: {reserve_fraction: -0.5}\n",
            "lease.reserve_fraction: -0.5 must not be negative",
        ),
        (
            "id: a\nrate: {units: 1, per: 1s}\nlease: {reserve_fraction: 0.12345678}\n",
            "more precision than one part per million",
        ),
        (
            "id: a\nrate: {units: 1, per: 1s}\neffective_at: next tuesday\n",
            "effective_at",
        ),
        ("rate: {units: 1, per: 1s}\n", "missing field `id`"),
    ];
    for (text, expected) in cases {
        let message = yaml_error(text);
        assert!(message.contains(expected), "{text:?}: {message}");
    }
}

#[test]
fn oversized_documents_are_refused_before_parsing() {
    let text = format!("id: a\ndescription: {}\n", "x".repeat(300 * 1024));
    let message = yaml_error(&text);
    assert!(message.contains("at most 262144"), "{message}");
}
