//! envoyproxy/ratelimit domains in the allocator's replicated state: each effective version
//! of a domain document puts every limited rule into the ledger as its own global policy of
//! the document's version, takes out the rules a new version dropped, and rolls back and
//! waits for its effective time like any policy.

use leasehold_allocator::replica::Machine;
use leasehold_allocator::state::{AdminError, AllocatorState, StateCommand, StateOutput};
use leasehold_common::ledger::{
    Acquire, Command, LedgerConfig, Level, Outcome, Report, WindowSpec,
};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use std::collections::BTreeMap;

const EDGE: &str = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: health
    rate_limit: {unlimited: true}
";
const T0: Nanos = Nanos(1_000_000_000_000);

fn apply(s: &mut AllocatorState, yaml: &str) -> StateOutput {
    apply_at(s, yaml, 0, false)
}

fn apply_at(s: &mut AllocatorState, yaml: &str, effective_at_ns: u64, shadow: bool) -> StateOutput {
    s.apply(
        T0,
        StateCommand::ApplyPolicy {
            yaml: yaml.into(),
            shadow,
            effective_at_ns,
            actor: "admin/ops".into(),
        },
    )
}

fn version(out: &StateOutput) -> u64 {
    match out {
        StateOutput::Policy { version, .. } => *version,
        other => panic!("not applied: {other:?}"),
    }
}

/// The ids a domain's limited rules are enforced under, by rule id.
fn rule_ids(yaml: &str) -> BTreeMap<String, String> {
    let doc = Policy::from_yaml(yaml).unwrap();
    let rules = doc.domain_rules().unwrap().unwrap();
    rules
        .policies()
        .map(|(rule, p)| (rule.to_owned(), p.id.clone()))
        .collect()
}

/// The ledger's policies of envoyproxy/ratelimit rules: id → version.
fn ledger_rules(s: &AllocatorState) -> BTreeMap<String, u64> {
    s.ledger()
        .policies()
        .filter(|p| p.policy_id.starts_with("envoy-"))
        .map(|p| (p.policy_id.clone(), p.version))
        .collect()
}

#[test]
fn each_limited_rule_is_a_global_window_policy_of_the_documents_version() {
    let mut s = AllocatorState::new(LedgerConfig::root("g"));
    let out = apply(&mut s, EDGE);
    assert!(
        matches!(&out, StateOutput::Policy { policy_id, version: 1, changed: true, .. } if policy_id == "ratelimit-edge"),
        "{out:?}"
    );
    let ids = rule_ids(EDGE);
    assert_eq!(ids.len(), 2, "the unlimited rule has no policy");
    let tenant = s
        .ledger()
        .policy(&ids["edge:tenant"])
        .expect("in the ledger");
    assert_eq!(tenant.version, 1);
    assert_eq!(tenant.owner, Level::Global);
    assert_eq!(
        tenant.lease.reserve_ppm, 0,
        "no reserve: all 5 can be granted"
    );
    assert_eq!(
        tenant.window,
        Some(WindowSpec::Fixed {
            window_ns: 60_000_000_000,
            limit: 5
        })
    );
    assert!(
        s.ledger().policy("ratelimit-edge").is_none(),
        "the document itself is no limit"
    );

    // The root owns the window: five units in all, to any holders.
    let acquire = |s: &mut AllocatorState, holder: &str, want: u64| {
        let cmd = Command::Acquire(Acquire {
            holder_id: holder.into(),
            policy_id: ids["edge:tenant"].clone(),
            key: format!("{}:tenant=acme", ids["edge:tenant"]),
            want_credit: want,
            demand_milli_per_sec: 0,
            request_id: 1,
            priority: 0,
        });
        match s.apply(T0, StateCommand::Ledger(cmd)) {
            StateOutput::Ledger(Ok(Outcome::Granted(g))) => g.lease.credit,
            StateOutput::Ledger(Ok(Outcome::Denied { .. })) => 0,
            other => panic!("{other:?}"),
        }
    };
    let first = acquire(&mut s, "gw-1", 3);
    let second = acquire(&mut s, "gw-2", 5);
    assert_eq!(first + second, 5, "granted {first} and {second}");
}

#[test]
fn a_new_version_moves_kept_rules_on_and_removes_dropped_ones() {
    let mut s = AllocatorState::new(LedgerConfig::root("g"));
    apply(&mut s, EDGE);
    let v1 = rule_ids(EDGE);
    // The path rule goes, a tenant/plan rule comes, the tenant rule changes its limit.
    let edited = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: plan
        rate_limit: {unit: hour, requests_per_unit: 100}
";
    assert_eq!(version(&apply(&mut s, edited)), 2);
    let v2 = rule_ids(edited);
    let expected: BTreeMap<String, u64> = v2.values().map(|id| (id.clone(), 2)).collect();
    assert_eq!(ledger_rules(&s), expected);
    assert!(s.ledger().policy(&v1["edge:path"]).is_none());
    assert_eq!(v1["edge:tenant"], v2["edge:tenant"], "a rule keeps its id");

    // A rollback is a new version with the old rules.
    let out = s.apply(
        T0,
        StateCommand::RollbackPolicy {
            policy_id: "ratelimit-edge".into(),
            to_version: 1,
            actor: "admin/ops".into(),
        },
    );
    assert_eq!(version(&out), 3);
    let expected: BTreeMap<String, u64> = v1.values().map(|id| (id.clone(), 3)).collect();
    assert_eq!(ledger_rules(&s), expected);
}

#[test]
fn a_version_waiting_for_its_time_changes_nothing_until_then() {
    let mut s = AllocatorState::new(LedgerConfig::root("g"));
    apply(&mut s, EDGE);
    let only_tenant = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 7}\n";
    let at = T0.0 + 5_000_000_000;
    assert_eq!(version(&apply_at(&mut s, only_tenant, at, false)), 2);
    // Replaced while pending: version 2 never takes effect.
    let three = only_tenant.replace("7}", "8}");
    assert_eq!(version(&apply_at(&mut s, &three, at, false)), 3);
    let v1 = rule_ids(EDGE);
    let before: BTreeMap<String, u64> = v1.values().map(|id| (id.clone(), 1)).collect();
    assert_eq!(ledger_rules(&s), before, "still version 1");
    s.apply(Nanos(at), StateCommand::Ledger(Command::Tick));
    let tenant = &v1["edge:tenant"];
    assert_eq!(ledger_rules(&s), BTreeMap::from([(tenant.clone(), 3)]));
    assert_eq!(
        s.ledger().policy(tenant).unwrap().window,
        Some(WindowSpec::Fixed {
            window_ns: 60_000_000_000,
            limit: 8
        })
    );
}

#[test]
fn documents_that_would_collide_are_refused_and_change_nothing() {
    let mut s = AllocatorState::new(LedgerConfig::root("g"));
    let a_b = "domain: a_b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    assert_eq!(version(&apply(&mut s, a_b)), 1);
    let before = s.clone();
    let refused = |out: StateOutput| match out {
        StateOutput::Refused(e) => e,
        other => panic!("not refused: {other:?}"),
    };
    let e = refused(apply(&mut s, &a_b.replace("a_b", "a-b")));
    assert!(
        matches!(&e, AdminError::Refused(m) if m.contains("domain 'a_b'") && m.contains("domain 'a-b'")),
        "{e}"
    );
    let plain = "id: ratelimit-a-b\nrate: {units: 1, per: 1s}\n";
    let e = refused(apply(&mut s, plain));
    assert!(
        e.to_string().contains("cannot become a policy document"),
        "{e}"
    );
    let rule_id = s.ledger().policies().next().unwrap().policy_id.clone();
    let e = refused(apply(
        &mut s,
        &format!("id: {rule_id}\nrate: {{units: 1, per: 1s}}\n"),
    ));
    assert!(
        matches!(&e, AdminError::Invalid(m) if m.contains("kept for the policies of envoyproxy/ratelimit rules")),
        "{e}"
    );
    let e = refused(apply(&mut s, "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minutes, requests_per_unit: 5}\n"));
    assert!(
        e.to_string().contains(
            "ratelimit.descriptors[0].rate_limit.unit: invalid rate limit unit 'minutes'"
        ),
        "{e}"
    );
    assert_eq!(s, before, "nothing changed, no audit entry");
}

#[test]
fn a_domain_beyond_the_ledgers_room_is_refused() {
    let mut config = LedgerConfig::root("g");
    config.limits.policies_max = 1;
    let mut s = AllocatorState::new(config);
    let e = match apply(&mut s, EDGE) {
        StateOutput::Refused(e) => e,
        other => panic!("not refused: {other:?}"),
    };
    assert!(e.to_string().contains("at most 1"), "{e}");
    assert!(s.policies().is_empty());
}

#[test]
fn shadow_counts_of_a_domain_add_up_its_rules() {
    let mut s = AllocatorState::new(LedgerConfig::root("g"));
    assert_eq!(version(&apply_at(&mut s, EDGE, 0, true)), 1);
    let ids = rule_ids(EDGE);
    let mut report = |policy: &str, key: String, holder: &str, would_deny: u64| {
        let cmd = Command::Acquire(Acquire {
            holder_id: holder.into(),
            policy_id: policy.into(),
            key,
            want_credit: 1,
            demand_milli_per_sec: 0,
            request_id: 1,
            priority: 0,
        });
        let lease_id = match s.apply(T0, StateCommand::Ledger(cmd)) {
            StateOutput::Ledger(Ok(Outcome::Granted(g))) => g.lease.lease_id,
            other => panic!("{other:?}"),
        };
        let r = Report {
            holder_id: holder.into(),
            lease_id,
            used: 1,
            return_credit: 0,
            want_credit: 0,
            demand_milli_per_sec: 0,
            request_id: 2,
            priority: 0,
        };
        s.apply(T0, StateCommand::report(r, would_deny, Default::default()));
    };
    let tenant = &ids["edge:tenant"];
    let path = &ids["edge:path"];
    report(tenant, format!("{tenant}:tenant=acme"), "gw-1", 4);
    report(path, format!("{path}:path=%2Fa"), "gw-2", 3);
    let tally = s.shadow_tally("ratelimit-edge", 1).expect("a tally");
    assert_eq!(tally.would_deny_requests, 7);
    assert_eq!(s.shadow_tally(tenant, 1).unwrap().would_deny_requests, 4);
    assert!(s.shadow_tally("ratelimit-edge", 2).is_none());
}
