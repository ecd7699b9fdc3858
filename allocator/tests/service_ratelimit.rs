//! envoyproxy/ratelimit files through the admin service: applied, previewed, diffed rule by
//! rule with the keys the rules hold, and rolled back like any policy.

mod service_support;

use leasehold_common::policy::Policy;
use leasehold_proto::leasehold::v1 as pb;
use service_support::start;

const EDGE: &str = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
";

fn apply(yaml: &str, dry_run: bool) -> pb::ApplyPolicyRequest {
    pb::ApplyPolicyRequest {
        yaml: yaml.into(),
        dry_run,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_domain_is_applied_diffed_and_rolled_back_as_one_document() {
    let c = start().await;
    let mut admin = c.admin();
    let preview = admin
        .apply_policy(apply(EDGE, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (preview.policy_id.as_str(), preview.version, preview.changed),
        ("ratelimit-edge", 1, true)
    );
    let v1 = admin
        .apply_policy(apply(EDGE, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((v1.policy_id.as_str(), v1.version), ("ratelimit-edge", 1));
    let same = admin
        .apply_policy(apply(EDGE, false))
        .await
        .unwrap()
        .into_inner();
    assert!(!same.changed, "the same file again is no new version");

    // A holder takes a lease on the rule, so the diff has a key to show.
    let stored = admin
        .get_policy(pb::GetPolicyRequest {
            policy_id: "ratelimit-edge".into(),
            version: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap();
    let doc = Policy::from_yaml(&stored.yaml).unwrap();
    assert_eq!(doc.ratelimit.as_deref(), Some(EDGE));
    let rules = doc.domain_rules().unwrap().unwrap();
    let (_, rule) = rules.policies().next().unwrap();
    let key = format!("{}:tenant=acme", rule.id);
    let granted = c
        .agent("gw-1")
        .acquire(pb::AcquireRequest {
            holder_id: "gw-1".into(),
            policy_id: rule.id.clone(),
            key: key.clone(),
            want_credit: 2,
            request_id: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(granted.lease.is_some(), "{granted:?}");

    let ten = EDGE.replace("requests_per_unit: 5", "requests_per_unit: 10");
    let d = admin
        .diff_policy(pb::DiffPolicyRequest {
            policy_id: "ratelimit-edge".into(),
            yaml: ten.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        d.diff,
        "ratelimit.descriptors[0].rate_limit.requests_per_unit: 5 -> 10"
    );
    assert_eq!(d.affected_keys_total, 1);
    assert_eq!(d.affected_keys[0].key, key);
    assert_eq!(d.affected_keys[0].holders, ["gw-1"]);

    let v2 = admin
        .apply_policy(apply(&ten, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v2.version, 2);
    let back = admin
        .rollback_policy(pb::RollbackPolicyRequest {
            policy_id: "ratelimit-edge".into(),
            to_version: 1,
            dry_run: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back.version, 3);
    assert!(
        back.diff
            .contains("ratelimit.descriptors[0].rate_limit.requests_per_unit: 10 -> 5"),
        "{}",
        back.diff
    );

    // Refused before anything changes, dry run or not.
    let bad = EDGE.replace("minute", "minutes");
    for dry_run in [true, false] {
        let e = admin.apply_policy(apply(&bad, dry_run)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.message()
                .contains("ratelimit.descriptors[0].rate_limit.unit: invalid rate limit unit"),
            "{}",
            e.message()
        );
    }
    let plain = "id: ratelimit-edge\nrate: {units: 1, per: 1s}\n";
    let e = admin.apply_policy(apply(plain, true)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{}", e.message());
}
