//! Dimensions naming a policy id the engine does not have: refused by default, admitted as
//! no rule when the engine allows unknown ids; Envoy descriptors without a rule stay OK.

use leasehold_agent::api::admit::AdmitServer;
use leasehold_agent::engine::{
    AdmitRequest, DenyReason, Dimension, Engine, Outcome, RuleSource, UnknownPolicy,
};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Nanos, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admit_service_server::AdmitService;
use std::sync::Arc;

fn engine(setting: Option<UnknownPolicy>) -> Engine {
    let api = Policy::from_yaml(
        "id: api\ndimensions: [{name: tenant, required: true}]\n\
         rate: {units: 5, per: 1s}\nburst: 5\nscope: process\n",
    )
    .unwrap();
    let envoy = EnvoyConfig::from_yaml(
        "edge.yaml",
        "domain: edge\ndescriptors:\n  - key: remote_address\n    \
         rate_limit: { unit: second, requests_per_unit: 1 }\n",
    )
    .unwrap();
    let mut builder = Engine::builder();
    if let Some(setting) = setting {
        builder = builder.unknown_policy(setting);
    }
    builder
        .build(RuleSource {
            envoy: Some(envoy),
            ..RuleSource::from_policies([api])
        })
        .unwrap()
}

const TENANT: &[(&str, &str)] = &[("tenant", "acme")];

#[test]
fn unknown_ids_are_refused_by_default_and_nothing_is_charged() {
    let e = engine(None);
    assert_eq!(e.unknown_policy(), UnknownPolicy::Deny);
    let dims = [
        Dimension::policy("api", TENANT),
        Dimension::policy("api-typo", TENANT),
    ];
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(0));
    assert!(!d.allowed);
    let denial = d.denial.unwrap();
    assert_eq!(
        (denial.dimension, denial.reason),
        (Some(1), DenyReason::UnknownPolicy)
    );
    assert_eq!(d.results[0].outcome, Outcome::RolledBack, "all or none");
    assert_eq!(
        d.results[1].outcome,
        Outcome::Denied(DenyReason::UnknownPolicy)
    );
    assert_eq!(d.results[1].policy_id, None);
    let s = e.stats();
    assert_eq!(s.unknown_policy, 1);
    assert_eq!(s.policies[0].counters.rolled_back, 1);
    let known = e.admit(&AdmitRequest::new(&dims[..1]), Nanos(0));
    assert_eq!(
        known.results[0].remaining, 4,
        "the refused request kept nothing"
    );
}

#[test]
fn allowing_unknown_ids_admits_them_as_no_rule() {
    let e = engine(Some(UnknownPolicy::Allow));
    let dims = [Dimension::policy("api-typo", TENANT)];
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(0));
    assert!(d.allowed);
    assert_eq!(d.results[0].outcome, Outcome::NoRule);
    assert_eq!(e.stats().unknown_policy, 1, "counted in either mode");
}

#[test]
fn envoy_descriptors_without_a_rule_stay_allowed_under_deny() {
    let e = engine(None);
    let dims = [Dimension::envoy("edge", &[("user_agent", "x")])];
    let d = e.admit(&AdmitRequest::new(&dims), Nanos(0));
    assert!(d.allowed);
    assert_eq!(d.results[0].outcome, Outcome::NoRule);
    let other_domain = [Dimension::envoy("elsewhere", &[("remote_address", "a")])];
    assert!(e.admit(&AdmitRequest::new(&other_domain), Nanos(0)).allowed);
    assert_eq!(e.stats().unknown_policy, 0);
}

fn native(policy_id: &str) -> pb::AdmitRequest {
    pb::AdmitRequest {
        dimensions: vec![pb::Dimension {
            policy_id: policy_id.into(),
            entries: vec![pb::dimension::Entry {
                key: "tenant".into(),
                value: "acme".into(),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn the_native_api_refuses_unknown_ids_by_default() {
    let server = AdmitServer::new(Arc::new(engine(None)), SystemClock::new());
    let r = server
        .admit(tonic::Request::new(native("api-typo")))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.allowed, "an unknown policy id must not pass as no rule");
    assert!(!r.results[0].allowed);
    assert_eq!(r.results[0].reason, pb::Reason::UnknownPolicy as i32);

    let allowing = AdmitServer::new(
        Arc::new(engine(Some(UnknownPolicy::Allow))),
        SystemClock::new(),
    );
    let r = allowing
        .admit(tonic::Request::new(native("api-typo")))
        .await
        .unwrap()
        .into_inner();
    assert!(r.allowed);
    assert_eq!(r.results[0].reason, pb::Reason::NoRule as i32);
}
