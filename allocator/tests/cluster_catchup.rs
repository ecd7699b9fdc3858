//! A follower that missed more than the leader keeps in its log catches up from a snapshot
//! after restarting from its data directory.

mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{acquire, policy, Cluster};
use leasehold_allocator::raft::NodeConfig;
use leasehold_allocator::replica::Replica;
use leasehold_common::ledger::Outcome;

fn small_snapshots(c: &mut NodeConfig) {
    c.snapshot_logs_since_last = 20;
    c.max_in_snapshot_log_to_keep = 0;
    // Small chunks so the snapshot travels in several install-snapshot RPCs.
    c.snapshot_chunk_len_max_bytes = 4 * 1024;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_follower_catches_up_through_a_snapshot() {
    let mut cluster = Cluster::start(3, small_snapshots).await;
    cluster
        .propose(policy(), Duration::from_secs(5))
        .await
        .unwrap();
    cluster.wait_converged(Duration::from_secs(5)).await;
    let leader_id = cluster.wait_leader(Duration::from_secs(5)).await;
    let follower = (1..=3).find(|id| *id != leader_id).unwrap();
    let follower_last = cluster.node(follower).metrics().last_log_index.unwrap();
    cluster.stop(follower).await;

    let leader = cluster.node(leader_id).clone();
    for i in 0..120u64 {
        let out = leader
            .propose(acquire(&format!("h{}", i % 30), i / 30 + 1, 3))
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(out, Outcome::Granted(_)), "acquire {i}: {out:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while leader.metrics().purged_index.unwrap_or(0) <= follower_last {
        assert!(Instant::now() < deadline, "leader never purged its log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    cluster.restart(follower).await;
    cluster.wait_converged(Duration::from_secs(10)).await;
    let restarted = cluster.node(follower).clone();
    let m = restarted.metrics();
    assert!(
        m.snapshot_index.unwrap_or(0) > follower_last,
        "follower caught up without a snapshot: {m:?}"
    );
    let expected = leader.read(|l| l.clone()).await.unwrap();
    assert_eq!(restarted.read_local(|l| l.clone()), expected);
    assert!(expected.conserved());
    // A fresh acquire supersedes the holder's previous lease but keeps it on the books.
    assert_eq!(expected.leases().count(), 120);

    // The restarted node keeps applying what comes next.
    leader
        .propose(acquire("late", 1, 3))
        .await
        .unwrap()
        .unwrap();
    cluster.wait_converged(Duration::from_secs(5)).await;
    assert_eq!(
        restarted.read_local(|l| l.clone()),
        leader.read_local(|l| l.clone())
    );
    for node in cluster.live() {
        node.shutdown().await;
    }
}
