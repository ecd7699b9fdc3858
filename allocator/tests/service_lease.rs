//! The lease service over gRPC with mutual TLS: signed grants, idempotent retries,
//! renewals, releases, refusals by role and holder, and watch events.

mod service_support;

use leasehold_allocator::replica::Replica;
use leasehold_allocator::service::convert::lease_from_pb;
use leasehold_proto::leasehold::v1 as pb;
use service_support::{start, POLICY};
use tokio_stream::StreamExt;

fn acquire(holder: &str, request_id: u64) -> pb::AcquireRequest {
    pb::AcquireRequest {
        holder_id: holder.into(),
        policy_id: "api".into(),
        key: "api:tenant=acme".into(),
        want_credit: 100,
        request_id,
        ..Default::default()
    }
}

async fn apply(c: &service_support::Cluster, yaml: &str) -> pb::ApplyPolicyResponse {
    c.admin()
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: yaml.into(),
            ..Default::default()
        })
        .await
        .expect("apply")
        .into_inner()
}

#[tokio::test]
async fn grants_are_signed_idempotent_renewable_and_released() {
    let c = start().await;
    apply(&c, POLICY).await;
    let mut agent = c.agent("gw-1");
    let first = agent
        .acquire(acquire("gw-1", 1))
        .await
        .unwrap()
        .into_inner();
    let lease = first.lease.clone().expect("granted");
    assert_eq!(lease.credit, 100);
    c.verifier
        .verify(&lease_from_pb(&lease))
        .expect("signed by the cluster key");
    let retry = agent
        .acquire(acquire("gw-1", 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        retry.lease.unwrap().lease_id,
        lease.lease_id,
        "a retry never grants twice"
    );

    let report = pb::ReportRequest {
        holder_id: "gw-1".into(),
        lease_id: lease.lease_id,
        used: 60,
        want_credit: 40,
        request_id: 2,
        ..Default::default()
    };
    let renewed = agent
        .report(report)
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert!(renewed.generation > lease.generation);
    assert_eq!(renewed.credit, 140);
    c.verifier
        .verify(&lease_from_pb(&renewed))
        .expect("renewal signed");

    let release = pb::ReleaseRequest {
        holder_id: "gw-1".into(),
        lease_id: lease.lease_id,
        final_used: 90,
        request_id: 3,
        ..Default::default()
    };
    let released = agent.release(release).await.unwrap().into_inner();
    assert_eq!((released.reclaimed, released.stranded), (50, 0));
    let late = pb::ReportRequest {
        holder_id: "gw-1".into(),
        lease_id: lease.lease_id,
        used: 90,
        request_id: 4,
        ..Default::default()
    };
    let err = agent.report(late).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let conserved = c.replica.read(|s| s.ledger().conserved());
    assert!(conserved.await.unwrap());
}

#[tokio::test]
async fn holders_act_only_as_themselves_and_never_as_admins() {
    let c = start().await;
    apply(&c, POLICY).await;
    let err = c
        .agent("gw-1")
        .acquire(acquire("gw-2", 1))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let mut as_admin =
        leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient::new(
            c.channel(leasehold_proto::transport::Role::Agent, "gw-1"),
        );
    let err = as_admin
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: POLICY.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
}

#[tokio::test]
async fn watch_delivers_policy_changes_emergencies_and_revocations() {
    let c = start().await;
    apply(&c, POLICY).await;
    let mut agent = c.agent("gw-1");
    let lease = agent
        .acquire(acquire("gw-1", 1))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    let mut events = agent
        .watch(pb::WatchRequest {
            holder_id: "gw-1".into(),
            policy_ids: vec!["api".into()],
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let first = events.next().await.unwrap().unwrap();
    assert!(
        matches!(first.event, Some(pb::watch_event::Event::PolicyChanged(_))),
        "{first:?}"
    );

    let mut admin = c.admin();
    admin
        .revoke_lease(pb::RevokeLeaseRequest {
            lease_id: lease.lease_id,
            reason: "drill".into(),
        })
        .await
        .unwrap();
    let switch = pb::EmergencySwitch {
        policy_id: "api".into(),
        mode: pb::EmergencyMode::FailOpen as i32,
        ..Default::default()
    };
    admin
        .set_emergency(pb::SetEmergencyRequest {
            emergency: Some(switch),
            reason: "incident".into(),
        })
        .await
        .unwrap();
    let mut seen = (false, false);
    while seen != (true, true) {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(5), events.next())
            .await
            .expect("event in time")
            .unwrap()
            .unwrap();
        match ev.event {
            Some(pb::watch_event::Event::Revoked(r)) => {
                assert_eq!(r.lease_id, lease.lease_id);
                seen.0 = true;
            }
            Some(pb::watch_event::Event::Emergency(e)) => {
                assert_eq!(e.mode, pb::EmergencyMode::FailOpen as i32);
                seen.1 = true;
            }
            _ => {}
        }
    }
    let renew = pb::ReportRequest {
        holder_id: "gw-1".into(),
        lease_id: lease.lease_id,
        used: 1,
        want_credit: 10,
        request_id: 2,
        ..Default::default()
    };
    let after = agent
        .report(renew)
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(
        after.generation, lease.generation,
        "a revoked lease is never renewed"
    );
}
