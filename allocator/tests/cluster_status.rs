//! The leader's view of its peers: a replicating follower stays fresh and matched, a stopped
//! one ages and falls behind.

mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{acquire, no_tuning, policy, Cluster};
use leasehold_allocator::replica::Replica;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_ages_in_the_leaders_view() {
    let mut cluster = Cluster::start(3, no_tuning).await;
    let leader_id = cluster.wait_leader(Duration::from_secs(10)).await;
    let leader = cluster.node(leader_id).clone();
    leader.propose(policy()).await.unwrap().unwrap();
    let (gone, live) = match leader_id {
        1 => (2, 3),
        2 => (1, 3),
        _ => (1, 2),
    };
    cluster.stop(gone).await;
    // The cluster keeps committing (as the leader's expiry ticks would).
    let started = Instant::now();
    let mut request = 1;
    while started.elapsed() < Duration::from_millis(2_500) {
        request += 1;
        leader
            .propose(acquire("h", request, 1))
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = leader.metrics();
    let live_p = m.peers.get(&live).expect("leader sees the live follower");
    let gone_p = m
        .peers
        .get(&gone)
        .expect("leader still lists the stopped follower");
    assert!(
        live_p.contact_age_ms.unwrap() < 1_000,
        "live follower is fresh: {live_p:?}"
    );
    assert!(
        live_p.matched_index.unwrap() + 5 >= m.last_log_index.unwrap(),
        "live follower is caught up: {live_p:?} vs {:?}",
        m.last_log_index
    );
    assert!(
        gone_p.contact_age_ms.unwrap() >= 2_000,
        "stopped follower ages: {gone_p:?}"
    );
    assert!(
        gone_p.matched_index.unwrap() + 20 < m.last_log_index.unwrap(),
        "stopped follower falls behind: {gone_p:?}"
    );
    // A follower knows no replication figures.
    assert!(cluster.node(live).metrics().peers.is_empty());
}
