//! Reading envoyproxy/ratelimit configuration: matching, loading and mapping.

use leasehold_common::key::{KeyBuilder, KeySchema};
use leasehold_common::policy::envoy::{
    EnvoyConfig, EnvoyError, EnvoyLimit, EnvoyUnit, MapError, Mapped, RuleTemplate,
};
use leasehold_common::policy::{Algorithm, Mode};
use std::path::PathBuf;

fn fixtures(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
}

fn config() -> EnvoyConfig {
    EnvoyConfig::load_dir(&fixtures("envoy")).unwrap()
}

fn limit(requests_per_unit: u32, unit: EnvoyUnit) -> Option<EnvoyLimit> {
    Some(EnvoyLimit {
        requests_per_unit,
        unit,
    })
}

#[test]
fn directory_loads_every_domain() {
    let c = config();
    let domains: Vec<&str> = c.domains().collect();
    assert_eq!(domains, ["edge", "tenants"]);
}

#[test]
fn key_only_rule_matches_any_value_and_a_specific_value_wins() {
    let c = config();
    let any = c.lookup("edge", &[("remote_address", "10.0.0.1")]).unwrap();
    assert_eq!(any.limit, limit(10, EnvoyUnit::Second));
    assert_eq!(any.rule_id, "edge:remote_address");
    let blocked = c.lookup("edge", &[("remote_address", "50.0.0.5")]).unwrap();
    assert_eq!(blocked.limit, limit(0, EnvoyUnit::Second));
    assert_eq!(blocked.rule_id, "edge:remote_address=50.0.0.5");
}

#[test]
fn wildcard_values_match_by_pattern_after_exact_values() {
    let c = config();
    let files = c.lookup("edge", &[("path", "/files/report.pdf")]).unwrap();
    assert_eq!(files.limit, limit(100, EnvoyUnit::Minute));
    assert_eq!(files.name.as_deref(), Some("files"));
    assert!(files.shadow_mode);
    assert_eq!(files.rule_id, "edge:path=%2Ffiles%2F*");
    let private = c.lookup("edge", &[("path", "/files/private")]).unwrap();
    assert_eq!(
        private.limit,
        limit(5, EnvoyUnit::Minute),
        "unit names ignore case"
    );
    assert!(!private.shadow_mode);
    assert!(c.lookup("edge", &[("path", "/other")]).is_none());
}

#[test]
fn unlimited_rules_are_marked() {
    let health = config()
        .lookup("edge", &[("health", "x")])
        .cloned()
        .unwrap();
    assert!(health.unlimited);
    assert_eq!(health.limit, None);
}

#[test]
fn nested_rules_apply_only_at_the_request_depth() {
    let c = config();
    let tenant = c.lookup("tenants", &[("tenant", "acme")]).unwrap();
    assert_eq!(tenant.limit, limit(100_000, EnvoyUnit::Day));
    let free = c
        .lookup("tenants", &[("tenant", "acme"), ("plan", "free")])
        .unwrap();
    assert_eq!(free.limit, limit(1000, EnvoyUnit::Day));
    assert_eq!(free.replaces, ["per-tenant"]);
    assert_eq!(free.rule_id, "tenants:tenant/plan=free");
    let deepest = c
        .lookup(
            "tenants",
            &[("tenant", "acme"), ("plan", "free"), ("route", "/v1/x")],
        )
        .unwrap();
    assert_eq!(deepest.limit, limit(50, EnvoyUnit::Week));
    assert!(deepest.detailed_metric);
    // The key-only `plan` rule has no limit of its own ...
    assert!(c
        .lookup("tenants", &[("tenant", "acme"), ("plan", "paid")])
        .is_none());
    // ... but its nested rule applies one level deeper.
    let export = c
        .lookup(
            "tenants",
            &[("tenant", "a"), ("plan", "paid"), ("route", "/v1/export")],
        )
        .unwrap();
    assert_eq!(export.limit, limit(3, EnvoyUnit::Hour));
}

#[test]
fn descriptors_without_a_rule_are_not_limited() {
    let c = config();
    assert!(c.lookup("edge", &[("user", "bob")]).is_none());
    assert!(c.lookup("nope", &[("remote_address", "1.2.3.4")]).is_none());
    assert!(c.lookup("edge", &[]).is_none());
    // A request deeper than the rules stops where the tree ends.
    assert!(c
        .lookup("edge", &[("remote_address", "1.2.3.4"), ("path", "/x")])
        .is_none());
    // A rule with neither a limit nor nested rules lets everything through.
    assert!(c.lookup("tenants", &[("bot", "200")]).is_none());
    // Matching is per level: a top-level key is not found one level down.
    assert!(c
        .lookup("tenants", &[("tenant", "a"), ("tenant", "b")])
        .is_none());
}

#[test]
fn duplicate_domain_names_both_files() {
    let err = EnvoyConfig::load_dir(&fixtures("envoy-duplicate")).unwrap_err();
    let EnvoyError::DuplicateDomain {
        domain,
        first,
        second,
    } = &err
    else {
        panic!("expected a duplicate domain, got {err}");
    };
    assert_eq!(domain, "edge");
    assert!(first.ends_with("a-edge.yaml"), "{first}");
    assert!(second.ends_with("b-edge-again.yaml"), "{second}");
    let message = err.to_string();
    assert!(message.contains("a-edge.yaml") && message.contains("b-edge-again.yaml"));
}

#[test]
fn scalar_values_are_read_as_written() {
    let text = "domain: d\ndescriptors:\n  - key: code\n    value: 200\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: ratio\n    value: 1.50\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let c = EnvoyConfig::from_yaml("d.yaml", text).unwrap();
    assert!(c.lookup("d", &[("code", "200")]).is_some());
    assert_eq!(
        c.lookup("d", &[("ratio", "1.50")]).unwrap().limit,
        limit(2, EnvoyUnit::Second)
    );
}

fn problems(text: &str) -> Vec<String> {
    match EnvoyConfig::from_yaml("bad.yaml", text) {
        Err(EnvoyError::Invalid { file, errors }) => {
            assert_eq!(file, "bad.yaml");
            errors.iter().map(ToString::to_string).collect()
        }
        other => panic!("expected field errors, got {other:?}"),
    }
}

#[test]
fn invalid_configurations_name_every_problem() {
    let text = "domain: ''\ndescriptors:\n\
        - key: ''\n\
        - key: a\n  rate_limit: {unit: secs, requests_per_unit: 1}\n\
        - key: b\n  rate_limit: {unit: second, unlimited: true}\n\
        - key: c\n  rate_limit: {unit: hour, name: n, replaces: [{name: n}, {name: ''}]}\n\
        - key: d\n  share_threshold: true\n\
        - key: e\n  value: x\n- key: e\n  value: x\n";
    assert_eq!(
        problems(text),
        [
            "domain: must not be empty",
            "descriptors[0].key: must not be empty",
            "descriptors[1].rate_limit.unit: invalid rate limit unit 'secs' (expected second, minute, hour, day, week, month or year)",
            "descriptors[2].rate_limit.unit: must not be set when unlimited is true",
            "descriptors[3].rate_limit.replaces[0].name: 'n' is the rule's own name",
            "descriptors[3].rate_limit.replaces[1].name: must not be empty",
            "descriptors[4].share_threshold: only allowed on a wildcard value (containing '*')",
            "descriptors[6]: duplicate rule for key 'e' and value 'x'",
        ]
    );
}

#[test]
fn unknown_fields_and_limits_are_refused() {
    let err = EnvoyConfig::from_yaml("x.yaml", "domain: d\ndescriptors: [{key: a, vaule: b}]\n")
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("x.yaml: descriptors[0]: unknown field `vaule`"),
        "{message}"
    );

    let mut deep = String::from("domain: d\ndescriptors:\n");
    for depth in 0..20 {
        let pad = "  ".repeat(depth * 2);
        deep.push_str(&format!("{pad}- key: k{depth}\n{pad}  descriptors:\n"));
    }
    let all = problems(&deep);
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(
        all[0].ends_with("descriptors: nesting deeper than 16 levels"),
        "{all:?}"
    );
    assert!(matches!(
        EnvoyConfig::from_yaml("big.yaml", &"#".repeat(2 * 1024 * 1024)),
        Err(EnvoyError::FileTooLarge { .. })
    ));
}

#[test]
fn limited_rules_map_to_fixed_window_policies() {
    let mapped = config().to_policies(&RuleTemplate::process());
    let by_rule = |id: &str| {
        mapped
            .iter()
            .find(|m| m.rule_id == id)
            .unwrap_or_else(|| panic!("no mapping for {id}"))
    };
    let Ok(Mapped::Policy(any)) = &by_rule("edge:remote_address").mapped else {
        panic!("expected a policy");
    };
    assert_eq!(any.algorithm, Algorithm::FixedWindow);
    let rate = any.rate.unwrap().to_rate().unwrap();
    assert_eq!((rate.units(), rate.period_ns()), (10, 1_000_000_000));
    assert_eq!(any.dimensions.len(), 1);
    assert_eq!(any.dimensions[0].name, "remote_address");
    assert!(
        any.id.starts_with("envoy-edge-remote-address-"),
        "{}",
        any.id
    );
    assert!(any.id.len() <= 64);

    assert_eq!(
        by_rule("edge:remote_address=50.0.0.5").mapped,
        Ok(Mapped::AlwaysOverLimit)
    );
    assert_eq!(by_rule("edge:health").mapped, Ok(Mapped::Unlimited));

    let Ok(Mapped::Policy(files)) = &by_rule("edge:path=%2Ffiles%2F*").mapped else {
        panic!("expected a policy");
    };
    assert_eq!(files.mode, Mode::Shadow);
    assert_eq!(files.dimensions[0].name, "path", "per-value counters");
    let Ok(Mapped::Policy(shared)) = &by_rule("edge:path=%2Fstatic%2F*").mapped else {
        panic!("expected a policy");
    };
    assert!(shared.dimensions.is_empty(), "share_threshold: one counter");

    let Ok(Mapped::Policy(free)) = &by_rule("tenants:tenant/plan=free").mapped else {
        panic!("expected a policy");
    };
    let names: Vec<&str> = free.dimensions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["tenant"], "the fixed plan value is not a dimension");
    let month = free.rate.unwrap();
    assert_eq!(month.per.as_ns(), 86_400 * 1_000_000_000);

    let rules_with_rate_limit_blocks = 10;
    assert_eq!(mapped.len(), rules_with_rate_limit_blocks);
}

#[test]
fn mapped_policy_ids_are_stable_and_distinct() {
    let first: Vec<String> = config()
        .to_policies(&RuleTemplate::process())
        .into_iter()
        .map(|m| m.rule_id)
        .collect();
    let ids = |c: &EnvoyConfig| -> Vec<String> {
        c.to_policies(&RuleTemplate::process())
            .into_iter()
            .filter_map(|m| match m.mapped {
                Ok(Mapped::Policy(p)) => Some(p.id),
                _ => None,
            })
            .collect()
    };
    let a = ids(&config());
    assert_eq!(a, ids(&config()));
    let mut unique = a.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), a.len());
    assert_eq!(first.len(), 10);
}

#[test]
fn mapped_policies_build_keys_from_descriptor_entries() {
    let c = config();
    let entries = [("tenant", "acme"), ("plan", "free")];
    let mapped = c.to_policies(&RuleTemplate::process());
    let rule = c.lookup("tenants", &entries).unwrap();
    let policy = mapped
        .iter()
        .find_map(|m| match &m.mapped {
            Ok(Mapped::Policy(p)) if m.rule_id == rule.rule_id => Some(p),
            _ => None,
        })
        .unwrap();
    let schema = KeySchema::new(policy).unwrap();
    let mut builder = KeyBuilder::new();
    let key = builder.build(&schema, &entries).unwrap();
    assert_eq!(key.key, format!("{}:tenant=acme", policy.id));
}

#[test]
fn repeated_varying_keys_cannot_be_mapped() {
    let text = "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 1}\n";
    let c = EnvoyConfig::from_yaml("d.yaml", text).unwrap();
    assert!(c.lookup("d", &[("k", "1"), ("k", "2")]).is_some());
    let mapped = c.to_policies(&RuleTemplate::process());
    assert_eq!(
        mapped[0].mapped,
        Err(MapError::RepeatedKey { key: "k".into() })
    );
}

/// `quota_mode` and `metadata` (in that service's shipped example) are accepted;
/// `quota_mode` is kept on the rule, metadata of any shape is not used.
#[test]
fn quota_mode_and_metadata_are_accepted() {
    let text = "domain: shop\ndescriptors:\n  - key: service\n    value: checkout\n    \
                quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 3}\n    \
                metadata:\n      owner: {team: payments, tags: [a, b]}\n  - key: cart\n    \
                metadata: {}\n    rate_limit: {unit: hour, requests_per_unit: 9}\n";
    let c = EnvoyConfig::from_yaml("shop.yaml", text).unwrap();
    let quota = c.lookup("shop", &[("service", "checkout")]).unwrap();
    assert!(quota.quota_mode);
    let plain = c.lookup("shop", &[("cart", "c1")]).unwrap();
    assert!(!plain.quota_mode);
    let err = EnvoyConfig::from_yaml(
        "bad.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    quota: true\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("quota"), "{err}");
}
