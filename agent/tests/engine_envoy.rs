//! envoyproxy/ratelimit rules enforced through the engine.

mod wall;

use leasehold_agent::engine::{AdmitRequest, DenyReason, Dimension, Engine, Outcome, RuleSource};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::time::Nanos;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: path
    value: /files/*
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1, name: files }
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: { unit: day, requests_per_unit: 3, name: free, replaces: [{ name: files }] }
  - key: health
    rate_limit: { unlimited: true }
"#;

fn engine() -> Engine {
    let envoy = EnvoyConfig::from_yaml("edge.yaml", CONFIG).unwrap();
    // Monotonic zero on a day boundary: windows start at the times these tests use.
    let (_, midnight) = wall::manual_wall("2026-03-01T00:00:00Z");
    Engine::builder()
        .wall_clock(midnight)
        .build(RuleSource {
            policies: Vec::new(),
            envoy: Some(envoy),
        })
        .unwrap()
}

fn decide(e: &Engine, descriptors: &[&[(&str, &str)]], now: u64) -> (bool, Vec<Outcome>) {
    let dims: Vec<Dimension<'_>> = descriptors
        .iter()
        .map(|entries| Dimension::envoy("edge", entries))
        .collect();
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(now));
    (d.allowed, d.results.iter().map(|r| r.outcome).collect())
}

const SEC: u64 = 1_000_000_000;

#[test]
fn key_only_rule_counts_each_value_apart_in_fixed_windows() {
    let e = engine();
    let a: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    let b: &[(&str, &str)] = &[("remote_address", "10.0.0.2")];
    assert_eq!(decide(&e, &[a], 0).1, [Outcome::Admitted]);
    assert_eq!(decide(&e, &[a], 0).1, [Outcome::Admitted]);
    assert_eq!(
        decide(&e, &[a], SEC - 1).1,
        [Outcome::Denied(DenyReason::OverLimit)]
    );
    assert_eq!(decide(&e, &[b], 0).1, [Outcome::Admitted], "another value");
    assert_eq!(decide(&e, &[a], SEC).1, [Outcome::Admitted], "next window");
}

#[test]
fn exact_value_with_zero_limit_always_refuses() {
    let e = engine();
    let blocked: &[(&str, &str)] = &[("remote_address", "50.0.0.5")];
    let (allowed, outcomes) = decide(&e, &[blocked], 0);
    assert!(!allowed);
    assert_eq!(outcomes, [Outcome::Denied(DenyReason::ZeroLimit)]);
    assert_eq!(e.stats().zero_limit_denied, 1);
}

#[test]
fn unlimited_and_unmatched_descriptors_are_not_limited() {
    let e = engine();
    let health: &[(&str, &str)] = &[("health", "x")];
    let unknown: &[(&str, &str)] = &[("colour", "blue")];
    let too_shallow: &[(&str, &str)] = &[("tenant", "acme")];
    let too_deep: &[(&str, &str)] = &[("remote_address", "1.1.1.1"), ("x", "y")];
    for _ in 0..10 {
        let (allowed, outcomes) = decide(&e, &[health, unknown, too_shallow, too_deep], 0);
        assert!(allowed);
        assert_eq!(
            outcomes,
            [
                Outcome::Unlimited,
                Outcome::NoRule,
                Outcome::NoRule,
                Outcome::NoRule
            ]
        );
    }
    let other_domain = [Dimension::envoy("nope", health)];
    let d = e.admit(&AdmitRequest::new(&other_domain), Nanos(0));
    assert_eq!(d.results[0].outcome, Outcome::NoRule);
}

#[test]
fn nested_descriptors_limit_per_varying_value() {
    let e = engine();
    let acme: &[(&str, &str)] = &[("tenant", "acme"), ("plan", "free")];
    let globex: &[(&str, &str)] = &[("tenant", "globex"), ("plan", "free")];
    let paid: &[(&str, &str)] = &[("tenant", "acme"), ("plan", "paid")];
    for _ in 0..3 {
        assert!(decide(&e, &[acme], 0).0);
    }
    assert_eq!(
        decide(&e, &[acme], 0).1,
        [Outcome::Denied(DenyReason::OverLimit)]
    );
    assert!(decide(&e, &[globex], 0).0, "each tenant has its own window");
    assert_eq!(decide(&e, &[paid], 0).1, [Outcome::NoRule]);
}

#[test]
fn shadow_rules_admit_and_replaced_rules_are_not_applied() {
    let e = engine();
    let file: &[(&str, &str)] = &[("path", "/files/a.pdf")];
    assert_eq!(decide(&e, &[file], 0).1, [Outcome::Admitted]);
    let (allowed, outcomes) = decide(&e, &[file], 0);
    assert!(allowed);
    assert_eq!(outcomes, [Outcome::ShadowDenied(DenyReason::OverLimit)]);

    let free: &[(&str, &str)] = &[("tenant", "acme"), ("plan", "free")];
    let (allowed, outcomes) = decide(&e, &[file, free], 0);
    assert!(allowed);
    assert_eq!(outcomes, [Outcome::Replaced, Outcome::Admitted]);
    let stats = e.stats();
    let files = stats
        .policies
        .iter()
        .find(|p| p.policy_id.starts_with("envoy-edge-path-"))
        .unwrap();
    assert_eq!(
        files.counters.offered, 2,
        "a replaced rule is offered nothing"
    );
    assert_eq!(files.counters.shadow_denied, 1);
}

#[test]
fn statuses_follow_request_order_and_any_refusal_refuses() {
    let e = engine();
    let health: &[(&str, &str)] = &[("health", "x")];
    let blocked: &[(&str, &str)] = &[("remote_address", "50.0.0.5")];
    let addr: &[(&str, &str)] = &[("remote_address", "10.0.0.9")];
    let (allowed, outcomes) = decide(&e, &[health, addr, blocked], 0);
    assert!(!allowed);
    assert_eq!(
        outcomes,
        [
            Outcome::Unlimited,
            Outcome::RolledBack,
            Outcome::Denied(DenyReason::ZeroLimit)
        ]
    );
    // The rolled-back dimension kept its two requests.
    assert!(decide(&e, &[addr], 0).0);
    assert!(decide(&e, &[addr], 0).0);
    assert!(!decide(&e, &[addr], 0).0);
}

#[test]
fn reloading_rules_keeps_the_counts_of_unchanged_ones() {
    let e = engine();
    let addr: &[(&str, &str)] = &[("remote_address", "10.0.0.7")];
    assert!(decide(&e, &[addr], 0).0);
    assert!(decide(&e, &[addr], 0).0);
    let more = format!(
        "{CONFIG}  - key: colour\n    rate_limit: {{ unit: hour, requests_per_unit: 1 }}\n"
    );
    e.reload_envoy(EnvoyConfig::from_yaml("edge.yaml", &more).unwrap())
        .unwrap();
    assert!(
        !decide(&e, &[addr], 0).0,
        "the unchanged rule kept its count"
    );
    assert!(
        decide(&e, &[&[("colour", "red")]], 0).0,
        "the new rule applies"
    );
}
