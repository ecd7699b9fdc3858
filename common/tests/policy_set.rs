//! The versioned policy registry: versions, rollback, diff and bounds.

use leasehold_common::policy::{
    diff, Applied, FieldChange, Policy, PolicySet, PolicySetError, PolicySetLimits,
};

fn policy(id: &str, units: u64) -> Policy {
    Policy::from_yaml(&format!("id: {id}\nrate: {{ units: {units}, per: 1s }}\n")).unwrap()
}

fn applied(version: u64, changed: bool) -> Applied {
    Applied { version, changed }
}

#[test]
fn versions_grow_only_on_change() {
    let mut set = PolicySet::default();
    assert_eq!(set.apply(policy("a", 10)).unwrap(), applied(1, true));
    assert_eq!(set.apply(policy("a", 10)).unwrap(), applied(1, false));
    assert_eq!(set.apply(policy("a", 20)).unwrap(), applied(2, true));
    assert_eq!(set.apply(policy("b", 20)).unwrap(), applied(1, true));
    assert_eq!(set.get("a").unwrap().version, 2);
    assert_eq!(set.get("a").unwrap().policy, policy("a", 20));
    assert_eq!(set.get_version("a", 1).unwrap().policy, policy("a", 10));
    let versions: Vec<u64> = set.history("a").unwrap().map(|v| v.version).collect();
    assert_eq!(versions, [1, 2]);
    assert_eq!(set.len(), 2);
    let ids: Vec<&str> = set.current().map(|v| v.policy.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
}

#[test]
fn equal_documents_written_differently_are_one_version() {
    let mut set = PolicySet::default();
    let explicit = Policy::from_yaml(
        "id: a\nrate: {units: 10, per: 1000ms}\nscope: global\nlease: {ttl: 10s}\n",
    )
    .unwrap();
    set.apply(policy("a", 10)).unwrap();
    assert_eq!(set.apply(explicit).unwrap(), applied(1, false));
}

#[test]
fn rollback_makes_a_new_version_equal_to_the_old_one() {
    let mut set = PolicySet::default();
    set.apply(policy("a", 10)).unwrap();
    set.apply(policy("a", 20)).unwrap();
    set.apply(policy("a", 30)).unwrap();
    assert_eq!(set.rollback("a", 1).unwrap(), applied(4, true));
    let current = set.get("a").unwrap();
    assert_eq!(current.policy, policy("a", 10));
    assert_eq!(current.rolled_back_from, Some(1));
    // Rolling back to what is already current changes nothing.
    assert_eq!(set.rollback("a", 1).unwrap(), applied(4, false));
    // Versions keep counting after a rollback.
    assert_eq!(set.apply(policy("a", 40)).unwrap(), applied(5, true));
}

#[test]
fn invalid_policies_are_refused_with_their_errors() {
    let mut set = PolicySet::default();
    let mut bad = policy("a", 10);
    bad.burst = Some(0);
    let err = set.apply(bad).unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy 'a' is invalid: burst: must be positive"
    );
    assert!(set.get("a").is_none());
}

#[test]
fn policy_count_is_bounded() {
    let limits = PolicySetLimits {
        policies_max: 2,
        versions_kept_max: 4,
    };
    let mut set = PolicySet::new(limits);
    set.apply(policy("a", 1)).unwrap();
    set.apply(policy("b", 1)).unwrap();
    let err = set.apply(policy("c", 1)).unwrap_err();
    assert_eq!(
        err,
        PolicySetError::TooManyPolicies {
            id: "c".into(),
            max: 2
        }
    );
    // Existing policies still take new versions at the bound.
    assert_eq!(set.apply(policy("b", 2)).unwrap(), applied(2, true));
}

#[test]
fn old_versions_are_dropped_beyond_the_bound() {
    let limits = PolicySetLimits {
        policies_max: 10,
        versions_kept_max: 3,
    };
    let mut set = PolicySet::new(limits);
    for units in 1..=5 {
        set.apply(policy("a", units)).unwrap();
    }
    let versions: Vec<u64> = set.history("a").unwrap().map(|v| v.version).collect();
    assert_eq!(versions, [3, 4, 5]);
    assert_eq!(set.get_version("a", 3).unwrap().policy, policy("a", 3));
    let err = set.rollback("a", 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy 'a' has no version 2 (kept: 3 to 5)"
    );
    assert!(matches!(
        set.get_version("a", 6),
        Err(PolicySetError::VersionNotKept { .. })
    ));
    assert!(matches!(
        set.rollback("zzz", 1),
        Err(PolicySetError::UnknownPolicy { .. })
    ));
}

#[test]
fn diff_lists_each_changed_field_in_document_order() {
    let old = Policy::from_yaml(
        "id: a\ndimensions: [{name: tenant}]\nrate: {units: 10, per: 1s}\n\
         priority_classes: [{name: x, priority: 1}, {name: y, priority: 2}]\n",
    )
    .unwrap();
    let new = Policy::from_yaml(
        "id: a\ndimensions: [{name: tenant, lowercase: true}]\nrate: {units: 20, per: 1m}\n\
         burst: 50\nlease: {reserve_fraction: 0.25}\npriority_classes: [{name: x, priority: 1}]\n",
    )
    .unwrap();
    let shown: Vec<String> = diff(&old, &new).iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "dimensions[0].lowercase: false -> true",
            "rate.units: 10 -> 20",
            "rate.per: 1s -> 1m",
            "burst: added 50",
            "lease.reserve_fraction: 0.1 -> 0.25",
            "priority_classes[1]: removed (was {name: y, priority: 2, weight: 1, borrow: false})",
        ]
    );
    assert!(diff(&old, &old).is_empty());
}

#[test]
fn diff_between_kept_versions() {
    let mut set = PolicySet::default();
    set.apply(policy("a", 10)).unwrap();
    set.apply(policy("a", 20)).unwrap();
    let changes = set.diff_versions("a", 1, 2).unwrap();
    assert_eq!(
        changes,
        [FieldChange {
            path: "rate.units".into(),
            old: Some("10".into()),
            new: Some("20".into()),
        }]
    );
}
