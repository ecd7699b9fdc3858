//! `LeaseBatch` over gRPC with mutual TLS: a holder's acquires, reports and releases in one
//! call become one replicated command, each answered as its own call would be; a malformed
//! or foreign batch is refused whole, naming what is wrong, and applies nothing.

mod service_support;

use leasehold_allocator::replica::{LocalReplica, Replica, ReplicaError};
use leasehold_allocator::service::convert::lease_from_pb;
use leasehold_allocator::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_common::ledger::LedgerConfig;
use leasehold_common::time::WallClock;
use leasehold_proto::leasehold::v1 as pb;
use pb::lease_batch_item::Call;
use pb::lease_batch_outcome::Outcome;
use service_support::{start_with, Cluster, POLICY};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// A replica counting the commands proposed to it.
#[derive(Clone)]
struct Counted {
    inner: LocalReplica<AllocatorState>,
    proposals: Arc<AtomicU64>,
}

impl Replica<AllocatorState> for Counted {
    fn propose(
        &self,
        command: StateCommand,
    ) -> impl Future<Output = Result<StateOutput, ReplicaError>> + Send {
        self.proposals.fetch_add(1, SeqCst);
        self.inner.propose(command)
    }

    fn read<R, F>(&self, f: F) -> impl Future<Output = Result<R, ReplicaError>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&AllocatorState) -> R + Send + 'static,
    {
        self.inner.read(f)
    }

    fn peek<R>(&self, f: impl FnOnce(&AllocatorState) -> R) -> Option<R> {
        self.inner.peek(f)
    }
}

async fn start() -> Cluster<Counted> {
    let inner = LocalReplica::new(
        AllocatorState::new(LedgerConfig::root("global")),
        Arc::new(WallClock),
    );
    let c = start_with(Counted {
        inner,
        proposals: Arc::new(AtomicU64::new(0)),
    })
    .await;
    c.admin()
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: POLICY.into(),
            ..Default::default()
        })
        .await
        .expect("apply");
    c
}

fn acquire(key: &str, request_id: u64) -> Call {
    Call::Acquire(pb::AcquireRequest {
        policy_id: "api".into(),
        key: format!("api:tenant={key}"),
        want_credit: 100,
        request_id,
        ..Default::default()
    })
}

fn batch(holder: &str, calls: Vec<Call>) -> pb::LeaseBatchRequest {
    pb::LeaseBatchRequest {
        holder_id: holder.into(),
        items: calls
            .into_iter()
            .map(|c| pb::LeaseBatchItem { call: Some(c) })
            .collect(),
    }
}

fn granted(o: &pb::LeaseBatchOutcome) -> pb::Lease {
    match &o.outcome {
        Some(Outcome::Acquired(a)) => a.lease.clone().expect("granted"),
        Some(Outcome::Reported(r)) => r.lease.clone().expect("renewed"),
        other => panic!("not a lease: {other:?}"),
    }
}

#[tokio::test]
async fn a_batch_is_one_command_answering_each_call_as_its_own() {
    let c = start().await;
    let mut agent = c.agent("gw-1");
    let before = c.replica.proposals.load(SeqCst);
    let first = batch(
        "gw-1",
        vec![acquire("a", 1), acquire("b", 2), acquire("c", 3)],
    );
    let got = agent.lease_batch(first.clone()).await.unwrap().into_inner();
    assert_eq!(c.replica.proposals.load(SeqCst) - before, 1, "one command");
    assert_eq!(got.outcomes.len(), 3);
    let leases: Vec<pb::Lease> = got.outcomes.iter().map(granted).collect();
    for (l, key) in leases.iter().zip(["a", "b", "c"]) {
        assert_eq!(
            (l.credit, l.key.as_str()),
            (100, &*format!("api:tenant={key}"))
        );
        assert_eq!(l.holder_id, "gw-1", "an empty holder is the batch's");
        c.verifier.verify(&lease_from_pb(l)).expect("signed");
    }
    let again = agent.lease_batch(first).await.unwrap().into_inner();
    let ids: Vec<u64> = again.outcomes.iter().map(|o| granted(o).lease_id).collect();
    let first_ids: Vec<u64> = leases.iter().map(|l| l.lease_id).collect();
    assert_eq!(ids, first_ids, "a retried batch grants nothing twice");

    let (a, b) = (&leases[0], &leases[1]);
    let second = batch(
        "gw-1",
        vec![
            Call::Report(pb::ReportRequest {
                lease_id: a.lease_id,
                used: 60,
                want_credit: 40,
                request_id: 4,
                ..Default::default()
            }),
            Call::Release(pb::ReleaseRequest {
                lease_id: b.lease_id,
                final_used: 30,
                request_id: 5,
                ..Default::default()
            }),
            Call::Report(pb::ReportRequest {
                lease_id: 999_999,
                used: 1,
                request_id: 6,
                ..Default::default()
            }),
        ],
    );
    let before = c.replica.proposals.load(SeqCst);
    let got = agent.lease_batch(second).await.unwrap().into_inner();
    assert_eq!(c.replica.proposals.load(SeqCst) - before, 1, "one command");
    let renewed = granted(&got.outcomes[0]);
    assert_eq!(renewed.credit, 140);
    assert!(renewed.generation > a.generation);
    match &got.outcomes[1].outcome {
        Some(Outcome::Released(r)) => assert_eq!((r.reclaimed, r.stranded), (70, 0)),
        other => panic!("not released: {other:?}"),
    }
    // The unknown lease fails in the batch as its own call fails, and alone.
    let Some(Outcome::Failed(f)) = &got.outcomes[2].outcome else {
        panic!("{:?}", got.outcomes[2]);
    };
    let alone = agent
        .report(pb::ReportRequest {
            holder_id: "gw-1".into(),
            lease_id: 999_999,
            used: 1,
            request_id: 7,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(tonic::Code::from(f.code), alone.code());
    assert_eq!(alone.code(), tonic::Code::NotFound);
    assert!(f.message.contains("999999"), "{}", f.message);
    let conserved = c.replica.read(|s| s.ledger().conserved());
    assert!(conserved.await.unwrap());
}

#[tokio::test]
async fn malformed_or_foreign_batches_are_refused_whole() {
    let c = start().await;
    let mut agent = c.agent("gw-1");
    let before = c.replica.proposals.load(SeqCst);
    let too_many = (0..1025)
        .map(|i| acquire(&format!("k{i}"), 1 + i))
        .collect();
    let foreign = Call::Acquire(pb::AcquireRequest {
        holder_id: "gw-2".into(),
        policy_id: "api".into(),
        key: "api:tenant=x".into(),
        request_id: 9,
        ..Default::default()
    });
    let cases = [
        (batch("gw-1", vec![]), "items: 0 given"),
        (batch("gw-1", too_many), "1 to 1024"),
        (
            batch("gw-1", vec![acquire("a", 1), foreign]),
            "items[1].holder_id",
        ),
        (
            pb::LeaseBatchRequest {
                holder_id: "gw-1".into(),
                items: vec![pb::LeaseBatchItem { call: None }],
            },
            "items[0]: names no call",
        ),
    ];
    for (req, names) in cases {
        let err = agent.lease_batch(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(err.message().contains(names), "{err}");
    }
    let err = c
        .agent("gw-2")
        .lease_batch(batch("gw-1", vec![acquire("a", 1)]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    assert_eq!(c.replica.proposals.load(SeqCst), before, "nothing proposed");
    let leases = c.replica.read(|s| s.ledger().leases().count());
    assert_eq!(leases.await.unwrap(), 0, "nothing granted");
}
