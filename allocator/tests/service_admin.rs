//! The admin service over gRPC with mutual TLS: versioned policies, budgets, the audit
//! trail naming each change's author.

mod service_support;

use leasehold_proto::leasehold::v1 as pb;
use service_support::{start, POLICY};
use tokio_stream::StreamExt;

#[tokio::test]
async fn policies_are_versioned_diffed_and_rolled_back() {
    let c = start().await;
    let mut admin = c.admin();
    let apply = |yaml: String, dry_run: bool| pb::ApplyPolicyRequest {
        yaml,
        dry_run,
        ..Default::default()
    };
    let v1 = admin
        .apply_policy(apply(POLICY.into(), false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (v1.policy_id.as_str(), v1.version, v1.changed),
        ("api", 1, true)
    );
    let same = admin
        .apply_policy(apply(POLICY.into(), false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((same.version, same.changed), (1, false));
    let faster = POLICY.replace("units: 100", "units: 250");
    let preview = admin
        .apply_policy(apply(faster.clone(), true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(preview.version, 2);
    assert!(
        preview.diff.contains("rate.units: 100 -> 250"),
        "{}",
        preview.diff
    );
    let got = admin
        .get_policy(pb::GetPolicyRequest {
            policy_id: "api".into(),
            version: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.policy.unwrap().version, 1, "a dry run changes nothing");
    admin.apply_policy(apply(faster, false)).await.unwrap();
    let back = admin
        .rollback_policy(pb::RollbackPolicyRequest {
            policy_id: "api".into(),
            to_version: 1,
            dry_run: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back.version, 3);
    let d = admin
        .diff_policy(pb::DiffPolicyRequest {
            policy_id: "api".into(),
            from_version: 2,
            to_version: 3,
            yaml: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(d.diff.contains("rate.units: 250 -> 100"), "{}", d.diff);
    let list = admin
        .list_policies(pb::ListPoliciesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.policies.len(), 1);
    assert!(
        list.policies[0].updated_by.contains("ops"),
        "{:?}",
        list.policies[0]
    );
}

#[tokio::test]
async fn invalid_documents_are_refused_by_field() {
    let c = start().await;
    let bad = POLICY.replace("burst: 200", "brust: 200");
    let err = c
        .admin()
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: bad,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("brust"), "{}", err.message());
}

#[tokio::test]
async fn budget_split_shows_in_the_tree_and_every_change_is_audited() {
    let c = start().await;
    let mut admin = c.admin();
    admin
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: POLICY.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut agent = c.agent("gw-1");
    let acquire = pb::AcquireRequest {
        holder_id: "gw-1".into(),
        policy_id: "api".into(),
        key: "api:tenant=acme".into(),
        want_credit: 80,
        request_id: 1,
        ..Default::default()
    };
    agent.acquire(acquire).await.unwrap();
    let shares = vec![
        pb::BudgetShare {
            name: "gw-1".into(),
            weight: 3,
        },
        pb::BudgetShare {
            name: "gw-2".into(),
            weight: 1,
        },
    ];
    let split = admin
        .split_budget(pb::SplitBudgetRequest {
            policy_id: "api".into(),
            children: shares,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        split
            .children
            .iter()
            .map(|c| c.rate_milli_per_sec)
            .collect::<Vec<_>>(),
        vec![75_000, 25_000]
    );
    let tree = admin
        .show_budget(pb::ShowBudgetRequest {
            policy_id: "api".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .root
        .unwrap();
    assert_eq!(
        (tree.name.as_str(), tree.burst, tree.outstanding),
        ("global", 200, 80)
    );
    assert_eq!(tree.children.len(), 1);
    assert_eq!(
        (tree.children[0].name.as_str(), tree.children[0].weight),
        ("gw-1", 3)
    );

    let entries: Vec<pb::AuditEntry> = admin
        .tail_audit(pb::TailAuditRequest {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .map(|e| e.unwrap())
        .collect()
        .await;
    let actions: Vec<&str> = entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, vec!["policy.apply", "budget.split"]);
    for e in &entries {
        assert!(
            e.actor.contains("admin") && e.actor.contains("ops"),
            "{e:?}"
        );
        assert!(!e.after.is_empty(), "{e:?}");
    }
    assert!(entries[0].before.is_empty() && entries[0].after.contains("id: api"));
}

/// A tail longer than one page is the newest entries, in order, every one of them.
#[tokio::test]
async fn a_long_audit_tail_is_the_newest_entries_in_order() {
    let c = start().await;
    let mut admin = c.admin();
    for units in 1..=300 {
        let yaml = POLICY.replace("units: 100", &format!("units: {units}"));
        admin
            .apply_policy(pb::ApplyPolicyRequest {
                yaml,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let tail = |limit| {
        let mut admin = c.admin();
        async move {
            admin
                .tail_audit(pb::TailAuditRequest {
                    limit,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .map(|e| e.unwrap().seq)
                .collect::<Vec<u64>>()
                .await
        }
    };
    let newest = tail(290).await;
    assert_eq!(newest, (11..=300).collect::<Vec<u64>>());
    assert_eq!(tail(3).await, vec![298, 299, 300]);
}
