//! envoyproxy/ratelimit domains arriving as policy documents (as the allocator's watch stream
//! brings them): each domain's tree matches descriptors, each limited rule is enforced as
//! its own policy under the id and version the allocator's ledger holds, several domains at
//! once, and a new version, a rollback or a removal replaces them.

use leasehold_agent::engine::{
    AdmitRequest, Dimension, Emergency, Engine, EngineError, Outcome, RuleSource,
};
use leasehold_common::policy::envoy::{EnvoyConfig, EnvoyUnit};
use leasehold_common::policy::{Policy, PolicyVersion, Scope};
use leasehold_common::time::Nanos;

const EDGE: &str = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: health
    rate_limit: {unlimited: true}
";
const MOBILE: &str = "\
domain: mobile
descriptors:
  - key: app
    rate_limit: {unit: hour, requests_per_unit: 100}
";

fn version(yaml: &str, version: u64) -> PolicyVersion {
    PolicyVersion {
        version,
        policy: Policy::from_yaml(yaml).unwrap(),
        rolled_back_from: None,
    }
}

/// The id the allocator's ledger runs the domain's only limited rule under.
fn rule_policy(yaml: &str) -> (String, Scope) {
    let doc = Policy::from_yaml(yaml).unwrap();
    let rules = doc.domain_rules().unwrap().unwrap();
    let (_, p) = rules.policies().next().unwrap();
    (p.id.clone(), p.scope)
}

/// The policy id, version and outcome one descriptor of `domain` gets.
fn check(e: &Engine, domain: &str, entries: &[(&str, &str)]) -> (Option<String>, u64, Outcome) {
    let dims = [Dimension::envoy(domain, entries)];
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(1));
    let r = &d.results[0];
    let id = r.policy_id.as_ref().map(|p| p.as_str().to_owned());
    (id, r.policy_version, r.outcome)
}

fn limit_of(e: &Engine, domain: &str, entries: &[(&str, &str)]) -> Option<(u32, EnvoyUnit)> {
    e.with_envoy_rule(domain, entries, |rule| {
        rule.and_then(|r| r.limit)
            .map(|l| (l.requests_per_unit, l.unit))
    })
}

#[test]
fn installed_domains_answer_under_the_ledgers_ids_and_versions() {
    let e = Engine::builder().build(RuleSource::default()).unwrap();
    let tenant: &[(&str, &str)] = &[("tenant", "acme")];
    assert_eq!(check(&e, "edge", tenant).2, Outcome::NoRule, "nothing yet");

    assert!(e.install_policy(version(EDGE, 3)).unwrap());
    assert!(e.install_policy(version(MOBILE, 1)).unwrap());
    assert_eq!(e.envoy_domains(), ["edge", "mobile"]);
    let (edge_rule, scope) = rule_policy(EDGE);
    assert_eq!(
        scope,
        Scope::Global,
        "shared: its budget is the allocator's"
    );
    let (id, v, _) = check(&e, "edge", tenant);
    assert_eq!((id.as_deref(), v), (Some(edge_rule.as_str()), 3));
    let (mobile_rule, _) = rule_policy(MOBILE);
    let (id, v, _) = check(&e, "mobile", &[("app", "ios")]);
    assert_eq!((id.as_deref(), v), (Some(mobile_rule.as_str()), 1));
    assert_eq!(check(&e, "edge", &[("health", "x")]).2, Outcome::Unlimited);
    assert_eq!(limit_of(&e, "edge", tenant), Some((5, EnvoyUnit::Minute)));
    let ids = e.policy_ids();
    assert!(
        ids.contains(&edge_rule) && ids.contains(&mobile_rule),
        "{ids:?}"
    );
    assert!(
        !ids.iter().any(|id| id.starts_with("ratelimit-")),
        "{ids:?}"
    );
    // An older version, or the same again, changes nothing.
    assert!(!e.install_policy(version(EDGE, 2)).unwrap());
    assert!(!e.install_policy(version(EDGE, 3)).unwrap());
}

#[test]
fn a_new_version_replaces_the_domains_rules_and_removal_drops_them() {
    let e = Engine::builder().build(RuleSource::default()).unwrap();
    e.install_policy(version(EDGE, 1)).unwrap();
    let tenant: &[(&str, &str)] = &[("tenant", "acme")];
    let edited = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 2}
";
    assert!(e.install_policy(version(edited, 2)).unwrap());
    assert_eq!(limit_of(&e, "edge", tenant), Some((50, EnvoyUnit::Hour)));
    let (id, v, _) = check(&e, "edge", tenant);
    assert_eq!(
        (id, v),
        (Some(rule_policy(EDGE).0), 2),
        "a rule keeps its id"
    );
    assert_eq!(
        check(&e, "edge", &[("health", "x")]).2,
        Outcome::NoRule,
        "dropped"
    );
    assert!(check(&e, "edge", &[("path", "/a")]).0.is_some(), "added");

    // A rollback arrives as a newer version with the old content.
    assert!(e.install_policy(version(EDGE, 3)).unwrap());
    assert_eq!(limit_of(&e, "edge", tenant), Some((5, EnvoyUnit::Minute)));
    assert_eq!(check(&e, "edge", &[("path", "/a")]).2, Outcome::NoRule);

    assert!(e.remove_policy("ratelimit-edge").unwrap());
    assert_eq!(check(&e, "edge", tenant).2, Outcome::NoRule);
    assert!(e.envoy_domains().is_empty());
    assert!(e.policy_ids().is_empty());
}

#[test]
fn an_emergency_naming_the_document_reaches_every_rule() {
    let e = Engine::builder().build(RuleSource::default()).unwrap();
    e.install_policy(version(EDGE, 1)).unwrap();
    e.set_emergency("ratelimit-edge", Emergency::FailOpen)
        .unwrap();
    assert_eq!(
        check(&e, "edge", &[("tenant", "acme")]).2,
        Outcome::FailOpen
    );
    e.set_emergency("ratelimit-edge", Emergency::Normal)
        .unwrap();
    assert_ne!(
        check(&e, "edge", &[("tenant", "acme")]).2,
        Outcome::FailOpen
    );
    assert!(matches!(
        e.set_emergency("ratelimit-other", Emergency::FailOpen),
        Err(EngineError::UnknownPolicy { .. })
    ));
}

#[test]
fn a_local_file_is_enforced_by_this_process_and_cannot_share_a_domain() {
    let local = EnvoyConfig::from_yaml("edge.yaml", EDGE).unwrap();
    let e = Engine::builder()
        .build(RuleSource {
            policies: Vec::new(),
            envoy: Some(local.clone()),
        })
        .unwrap();
    // Five a minute in this process: a local fixed window, no lease.
    let tenant: &[(&str, &str)] = &[("tenant", "acme")];
    let admitted = (0..8)
        .filter(|_| check(&e, "edge", tenant).2 == Outcome::Admitted)
        .count();
    assert_eq!(admitted, 5);
    assert!(
        e.take_acquire_queue().unwrap().try_recv().is_err(),
        "nothing leased"
    );

    let err = Engine::builder()
        .build(RuleSource {
            policies: vec![version(EDGE, 1)],
            envoy: Some(local),
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("domain 'edge' is defined in both"),
        "{err}"
    );
}
