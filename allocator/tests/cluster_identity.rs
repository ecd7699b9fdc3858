//! Cluster identity on real sockets with mutual TLS: one CA for the whole deployment, yet
//! only a cluster's own nodes may take part in its Raft, an allocator may hold leases only
//! as its own cluster, and a certificate of another SPIFFE trust domain names no one.

mod hierarchy_support;

use hierarchy_support::{admin, channels, eventually, start_node};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_client::LeaseServiceClient;
use leasehold_proto::leasehold::v1::raft_service_client::RaftServiceClient;
use leasehold_proto::transport::{DevPki, PkiSpec, Role};
use std::time::SystemTime;

/// A Vote request for a far higher term, as a hostile peer would send it.
fn inflated_vote() -> pb::RaftBytes {
    let vote = openraft::raft::VoteRequest::<u64> {
        vote: openraft::Vote::new(1_000, 1),
        last_log_id: None,
    };
    pb::RaftBytes {
        data: postcard::to_allocvec(&vote).unwrap(),
    }
}

async fn term(pki: &DevPki, addr: &str) -> u64 {
    let status = admin(pki, addr)
        .await
        .cluster_status(pb::ClusterStatusRequest {})
        .await
        .unwrap();
    status.into_inner().term
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_clusters_members_take_part_in_its_raft_and_act_as_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1", "global-7", "eu-1"], &["gw-1"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let root = start_node(dir.path(), "global", None).await;
    eventually(15, "the root to elect itself", || {
        let (pki, addr) = (&pki, root.addr.clone());
        async move {
            admin(pki, &addr)
                .await
                .cluster_status(pb::ClusterStatusRequest {})
                .await
                .is_ok_and(|s| s.into_inner().leader_id == 1)
        }
    })
    .await;
    let before = term(&pki, &root.addr).await;

    // Another cluster's node, and a node named for this cluster that is not a member.
    for name in ["eu-1", "global-7"] {
        let channel = channels(&pki, Role::Allocator, name)
            .channel(&root.addr)
            .unwrap();
        let refused = RaftServiceClient::new(channel)
            .vote(inflated_vote())
            .await
            .expect_err("a non-member's vote request is refused");
        assert_eq!(
            refused.code(),
            tonic::Code::PermissionDenied,
            "{name}: {refused:?}"
        );
    }
    assert_eq!(
        term(&pki, &root.addr).await,
        before,
        "the term was not inflated"
    );

    // An allocator holds leases only as its own cluster.
    let eu = channels(&pki, Role::Allocator, "eu-1")
        .channel(&root.addr)
        .unwrap();
    let acquire = |holder: &str| pb::AcquireRequest {
        holder_id: holder.into(),
        policy_id: "none".into(),
        key: "none:k".into(),
        want_credit: 1,
        request_id: 1,
        ..Default::default()
    };
    let foreign = LeaseServiceClient::new(eu.clone())
        .acquire(acquire("alloc:us"))
        .await
        .expect_err("acting as another cluster");
    assert_eq!(foreign.code(), tonic::Code::PermissionDenied, "{foreign:?}");
    let own = LeaseServiceClient::new(eu)
        .acquire(acquire("alloc:eu"))
        .await
        .expect_err("the policy does not exist");
    assert_eq!(
        own.code(),
        tonic::Code::NotFound,
        "as itself it is heard: {own:?}"
    );
    root.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_another_trust_domain_names_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = PkiSpec::local(&["global-1"], &[], &["ops"]);
    spec.trust_domain = "evil".into();
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let root = start_node(dir.path(), "global", None).await;
    let refused = loop {
        match admin(&pki, &root.addr)
            .await
            .list_policies(pb::ListPoliciesRequest::default())
            .await
        {
            Err(s) if s.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            other => break other.expect_err("an admin of another trust domain"),
        }
    };
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(refused.message().contains("trust domain"), "{refused:?}");
    root.shut_down().await;
}
