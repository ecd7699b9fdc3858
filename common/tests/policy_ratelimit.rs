//! envoyproxy/ratelimit files applied as policy documents: recognised by their shape, stored
//! under an id the domain names, validated with field paths, diffed rule by rule and mapped
//! onto shared, leased policies.

use leasehold_common::ledger::{PolicyParams, WindowSpec};
use leasehold_common::policy::envoy::{
    document_id, is_ratelimit_yaml, EnvoyConfig, Mapped, RuleTemplate, RATELIMIT_LEN_MAX,
};
use leasehold_common::policy::{
    diff, Algorithm, Mode, Policy, PolicyError, PolicySet, PolicySetLimits, Ppm, Problem, Scope,
};

const EDGE: &str = "\
# Five a minute per tenant, one a second for a path.
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /files/*
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: health
    rate_limit: {unlimited: true}
";

/// The stored form of the `edge` domain, with `fields` set besides `id` and `ratelimit`.
fn stored(id: &str, fields: &str) -> String {
    let indented: String = EDGE.lines().map(|l| format!("  {l}\n")).collect();
    format!("id: {id}\n{fields}ratelimit: |\n{indented}")
}

fn doc(text: &str) -> Policy {
    Policy::from_yaml(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Every broken rule, as `path: problem` lines.
fn errors(text: &str) -> Vec<String> {
    match Policy::from_yaml(text) {
        Err(PolicyError::Invalid(errors)) => errors.0.iter().map(ToString::to_string).collect(),
        other => panic!("expected field errors, got {other:?}"),
    }
}

#[test]
fn a_file_of_that_service_is_recognised_by_its_shape() {
    assert!(is_ratelimit_yaml(EDGE));
    assert!(is_ratelimit_yaml("descriptors: []\n"));
    assert!(!is_ratelimit_yaml("id: api\nrate: {units: 1, per: 1s}\n"));
    assert!(!is_ratelimit_yaml("[domain, descriptors]\n"));
    assert!(!is_ratelimit_yaml("domain: [unclosed\n"));
    // An id makes it a policy document, where `domain` is no field.
    assert!(!is_ratelimit_yaml("id: api\ndomain: edge\n"));
    let e = Policy::from_yaml("id: api\ndomain: edge\n").unwrap_err();
    assert!(e.to_string().contains("unknown field `domain`"), "{e}");

    let p = doc(EDGE);
    assert_eq!(p.id, "ratelimit-edge");
    assert_eq!(p.ratelimit.as_deref(), Some(EDGE), "kept as written");
    assert_eq!(p.mode, Mode::Enforce);
    assert_eq!(p.scope, Scope::Global);
}

#[test]
fn the_domain_names_the_document() {
    assert_eq!(document_id("edge").as_deref(), Some("ratelimit-edge"));
    assert_eq!(
        document_id("Edge_Proxy.v2").as_deref(),
        Some("ratelimit-edge-proxy-v2")
    );
    assert_eq!(
        document_id("a".repeat(54).as_str()).map(|id| id.len()),
        Some(64)
    );
    for bad in ["", "edge/v2", "edge proxy", "ünïcode", &"a".repeat(55)] {
        assert_eq!(document_id(bad), None, "{bad:?}");
    }
    let text = "domain: edge/v2\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("ratelimit.domain: domain 'edge/v2' cannot name a policy"),
        "{errs:?}"
    );
}

#[test]
fn every_problem_of_the_file_is_reported_at_its_path() {
    let text = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minutes, requests_per_unit: 5}
  - key: ''
  - key: k
    descriptors:
      - key: k
        rate_limit: {unit: second, requests_per_unit: 1}
";
    let errs = errors(text);
    assert_eq!(
        errs[..2],
        [
            "ratelimit.descriptors[0].rate_limit.unit: invalid rate limit unit 'minutes' (expected second, minute, hour, day, week, month or year)",
            "ratelimit.descriptors[1].key: must not be empty",
        ],
        "{errs:?}"
    );
    // A rule that loads but cannot become a policy, once the file loads.
    let text = "domain: edge\ndescriptors:\n  - key: k\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 1}\n";
    let errs = errors(text);
    assert_eq!(
        errs,
        ["ratelimit.descriptors[0].descriptors[0]: the rule cannot be enforced: descriptor key 'k' appears twice in the rule's varying path"]
    );
    let errs = errors("domain: edge\ndescriptors: [{key: a, vaule: b}]\n");
    assert!(
        errs[0].starts_with("ratelimit: not envoyproxy/ratelimit YAML: ")
            && errs[0].contains("unknown field `vaule`"),
        "{errs:?}"
    );
    let errs = errors("descriptors: []\n");
    assert_eq!(errs, ["ratelimit.domain: must not be empty"]);
}

#[test]
fn a_stored_document_keeps_to_its_own_fields() {
    let written = doc(EDGE).to_yaml().unwrap();
    assert!(
        !written.contains("\nalgorithm:") && !written.contains("\nlease:"),
        "the fields of one limit are left out: {written}"
    );
    assert!(
        written
            .trim_end()
            .ends_with("rate_limit: {unlimited: true}"),
        "{written}"
    );
    assert_eq!(doc(&written), doc(EDGE), "read back equal:\n{written}");
    assert_eq!(doc(&stored("ratelimit-edge", "")), doc(EDGE));

    let errs = errors(&stored(
        "ratelimit-edge",
        "rate: {units: 5, per: 1m}\nalgorithm: gcra\n",
    ));
    assert_eq!(
        errs,
        [
            "algorithm: not used when ratelimit is set (each rule's limit is its rate_limit)",
            "rate: not used when ratelimit is set (each rule's limit is its rate_limit)",
        ]
    );
    let errs = errors(&stored("ratelimit-edge", "scope: process\n"));
    assert!(
        errs[0].starts_with("scope: scope process cannot be honoured"),
        "{errs:?}"
    );
    let errs = errors(&stored(
        "ratelimit-edge",
        "failure: {mode: restricted, min_priority: 1, rate: {units: 1, per: 1s}}\n",
    ));
    assert!(
        errs[0].starts_with("failure.mode: restricted cannot be honoured"),
        "{errs:?}"
    );
    let errs = errors(&stored("ratelimit-other", ""));
    assert_eq!(
        errs,
        ["id: 'ratelimit-other' must be 'ratelimit-edge', the id of envoyproxy/ratelimit domain 'edge'"]
    );
    let big = format!("{EDGE}{}\n", "#".repeat(RATELIMIT_LEN_MAX));
    let errs = errors(&big);
    assert!(
        errs[0].starts_with("ratelimit: ") && errs[0].contains("at most 98304"),
        "{errs:?}"
    );
    // What a document may set applies to the whole domain.
    let shared = doc(&stored(
        "ratelimit-edge",
        "mode: shadow\nkill_switch: true\nfailure: {mode: fail_open}\nscope: region\n",
    ));
    assert_eq!(shared.mode, Mode::Shadow);
    assert_eq!(shared.scope, Scope::Region);
}

#[test]
fn its_rules_become_shared_fixed_window_policies_with_no_reserve() {
    let p = doc(EDGE);
    let rules = p.domain_rules().unwrap().unwrap();
    assert_eq!(rules.domain, "edge");
    assert!(rules.config.lookup("edge", &[("tenant", "acme")]).is_some());
    let policies: Vec<(&str, &Policy)> = rules.policies().collect();
    assert_eq!(policies.len(), 2, "the unlimited rule has no policy");
    let (rule_id, tenant) = policies[0];
    assert_eq!(rule_id, "edge:tenant");
    assert_eq!(tenant.algorithm, Algorithm::FixedWindow);
    assert_eq!(tenant.scope, Scope::Global);
    assert_eq!(tenant.lease.reserve_fraction, Ppm(0));
    assert_eq!(tenant.mode, Mode::Enforce);
    assert_eq!(
        policies[1].1.mode,
        Mode::Shadow,
        "the rule's own shadow_mode"
    );

    // The ledger runs each as a window of the rule's limit, under the rule's policy id,
    // which is the id the same rule gets from a local file.
    let params = PolicyParams::from_policy(tenant, 7).unwrap();
    assert_eq!(params.version, 7);
    assert_eq!(params.lease.reserve_ppm, 0);
    assert_eq!(
        params.window,
        Some(WindowSpec::Fixed {
            window_ns: 60_000_000_000,
            limit: 5
        })
    );
    let local = EnvoyConfig::from_yaml("edge.yaml", EDGE)
        .unwrap()
        .to_policies(&RuleTemplate::process());
    let Ok(Mapped::Policy(local_tenant)) = &local[0].mapped else {
        panic!("expected a policy")
    };
    assert_eq!(local_tenant.id, tenant.id);
    assert_eq!(local_tenant.scope, Scope::Process);

    let shadowed = doc(&stored(
        "ratelimit-edge",
        "mode: shadow\nkill_switch: true\n",
    ));
    let rules = shadowed.domain_rules().unwrap().unwrap();
    assert!(rules
        .policies()
        .all(|(_, p)| p.mode == Mode::Shadow && p.kill_switch));
    assert!(doc("id: api\nrate: {units: 1, per: 1s}\n")
        .domain_rules()
        .is_none());
}

#[test]
fn versions_diff_rule_by_rule_and_roll_back() {
    let mut set = PolicySet::new(PolicySetLimits::default());
    assert_eq!(set.apply(doc(EDGE)).unwrap().version, 1);
    let ten = EDGE.replace("requests_per_unit: 5", "requests_per_unit: 10");
    assert_eq!(set.apply(doc(&ten)).unwrap().version, 2);
    let changes = set.diff_versions("ratelimit-edge", 1, 2).unwrap();
    let lines: Vec<String> = changes.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        ["ratelimit.descriptors[0].rate_limit.requests_per_unit: 5 -> 10"]
    );
    // A comment changes the text only: a new version, and a diff that says so.
    let commented = format!("{ten}# reviewed\n");
    assert_eq!(set.apply(doc(&commented)).unwrap().version, 3);
    let lines: Vec<String> = set
        .diff_versions("ratelimit-edge", 2, 3)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("ratelimit: ") && lines[0].contains("only comments or layout"),
        "{lines:?}"
    );

    let back = set.rollback("ratelimit-edge", 1).unwrap();
    assert_eq!(back.version, 4);
    let current = set.get("ratelimit-edge").unwrap();
    assert_eq!(current.policy, doc(EDGE));
    assert_eq!(current.rolled_back_from, Some(1));
    assert!(diff(
        &set.get_version("ratelimit-edge", 1).unwrap().policy,
        &current.policy
    )
    .is_empty());
}

#[test]
fn problems_are_typed() {
    let Err(PolicyError::Invalid(errors)) = Policy::from_yaml("domain: 'a b'\ndescriptors: []\n")
    else {
        panic!("expected field errors")
    };
    assert!(matches!(
        &errors.0[0].problem,
        Problem::DomainId { domain, .. } if domain == "a b"
    ));
}
