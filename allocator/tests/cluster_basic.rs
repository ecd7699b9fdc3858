//! A three-node allocator cluster on loopback sockets: leadership, grants, follower answers and
//! a minority that must not grant.

mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{acquire, no_tuning, policy, Cluster, KEY};
use leasehold_allocator::replica::{Replica, ReplicaError};
use leasehold_common::ledger::{Command, Outcome};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_elects_a_leader_and_grants_while_followers_point_to_it() {
    let cluster = Cluster::start(3, no_tuning).await;
    let leader_id = cluster.wait_leader(Duration::from_secs(10)).await;
    let leader = cluster.node(leader_id);
    let leader_addr = cluster.members[(leader_id - 1) as usize].addr.clone();

    leader.propose(policy()).await.unwrap().unwrap();
    let granted = leader.propose(acquire("h1", 1, 10)).await.unwrap().unwrap();
    let Outcome::Granted(grant) = granted else {
        panic!("expected a grant, got {granted:?}");
    };
    assert_eq!(grant.lease.credit, 10);

    // Commands waiting together are replicated as one batch, each answered on its own.
    let log_before = leader.metrics().last_log_index.unwrap();
    let answers = futures_join(
        (2..=51)
            .map(|i| {
                let node = leader.clone();
                async move { node.propose(acquire(&format!("h{i}"), 1, i)).await }
            })
            .collect(),
    )
    .await;
    let entries = leader.metrics().last_log_index.unwrap() - log_before;
    assert!(
        entries < 50,
        "50 concurrent commands took {entries} log entries"
    );
    for (i, a) in (2..=51).zip(answers) {
        let Ok(Ok(Outcome::Granted(g))) = a else {
            panic!("holder h{i}: {a:?}")
        };
        assert_eq!(
            (g.lease.holder_id.as_str(), g.lease.credit),
            (&*format!("h{i}"), i)
        );
    }

    let (outstanding, lease_holder) = leader
        .read(move |l| {
            (
                l.account(KEY).unwrap().outstanding,
                l.lease(grant.lease.lease_id)
                    .map(|r| r.lease.holder_id.clone()),
            )
        })
        .await
        .unwrap();
    assert_eq!(outstanding, 10 + (2..=51).sum::<u64>());
    assert_eq!(lease_holder.as_deref(), Some("h1"));

    for follower in cluster.live().iter().filter(|n| n.node_id() != leader_id) {
        let expected = ReplicaError::NotLeader {
            leader_id: Some(leader_id),
            leader_addr: Some(leader_addr.clone()),
        };
        assert_eq!(follower.propose(Command::Tick).await, Err(expected.clone()));
        assert_eq!(follower.read(|l| l.now()).await, Err(expected));
        let m = follower.metrics();
        assert_eq!(m.leader_addr.as_deref(), Some(leader_addr.as_str()));
        assert_eq!(m.voters.len(), 3);
    }
    for node in cluster.live() {
        node.shutdown().await;
    }
}

async fn futures_join<F: std::future::Future + Send + 'static>(futs: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_cannot_grant_and_applies_nothing() {
    let mut cluster = Cluster::start(3, no_tuning).await;
    cluster
        .propose(policy(), Duration::from_secs(5))
        .await
        .unwrap();
    cluster
        .propose(acquire("h1", 1, 5), Duration::from_secs(5))
        .await
        .unwrap();
    cluster.wait_converged(Duration::from_secs(5)).await;
    let leader_id = cluster.wait_leader(Duration::from_secs(5)).await;
    for id in (1..=3).filter(|id| *id != leader_id) {
        cluster.stop(id).await;
    }
    let survivor = cluster.node(leader_id).clone();
    let before = survivor.read_local(|l| l.clone());
    let applied_before = survivor.metrics().last_applied_index;
    // Past the election timeout the survivor knows it has lost its quorum.
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    let started = Instant::now();
    let answer = survivor.propose(acquire("h2", 1, 5)).await;
    assert!(
        matches!(
            answer,
            Err(ReplicaError::NotLeader { .. } | ReplicaError::Unavailable(_))
        ),
        "minority answered {answer:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let read = survivor.read(|l| l.now()).await;
    assert!(
        read.is_err(),
        "minority served a linearizable read: {read:?}"
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(survivor.metrics().last_applied_index, applied_before);
    assert_eq!(survivor.read_local(|l| l.clone()), before);
    survivor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_signal_stops_a_single_node_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (signal, on_signal) = tokio::sync::oneshot::channel::<()>();
    let node = leasehold_allocator::raft::RaftNode::start(
        cluster_support::test_config(1, &addr, dir.path()),
        leasehold_common::ledger::Ledger::new(leasehold_common::ledger::LedgerConfig::root("g")),
        listener,
        async move {
            let _ = on_signal.await;
        },
    )
    .await
    .unwrap();
    node.initialize([(1, addr.clone())].into()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.propose(policy()).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "single node never accepted a command"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = node.propose(acquire("h1", 1, 4)).await.unwrap().unwrap();
    assert!(matches!(out, Outcome::Granted(_)), "{out:?}");

    signal.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(&addr).await.is_ok() {
        assert!(Instant::now() < deadline, "raft endpoint still accepting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(
        node.propose(Command::Tick).await,
        Err(ReplicaError::Unavailable(_))
    ));
}
