//! Leader loss: acknowledged grants survive, credit is conserved and never granted twice,
//! retries are answered from the ledger, and the replicated timeline neither goes back nor runs
//! ahead of real time.

mod cluster_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::{acquire, no_tuning, policy, propose_anywhere, Cluster, Node, KEY};
use leasehold_allocator::replica::Replica;
use leasehold_common::ledger::{ClosedAs, Command, Outcome, Release};
use leasehold_common::time::Nanos;

const RETRY: Duration = Duration::from_secs(8);

/// What one holder was told, in order.
#[derive(Debug, Default)]
struct HolderLog {
    /// Acknowledged grants: lease id → (request id, credit).
    granted: BTreeMap<u64, (u64, u64)>,
    /// Leases whose release was acknowledged.
    released: Vec<u64>,
    last_acquire: Option<(u64, u64)>,
}

/// Acquires and (two times out of three) releases in a loop until `stop`, retrying every
/// command with its request id until it is answered.
async fn holder_loop(
    live: Arc<Mutex<Vec<Node>>>,
    holder: String,
    stop: Arc<AtomicBool>,
) -> HolderLog {
    let mut log = HolderLog::default();
    let mut request_id = 0;
    let nodes = || live.lock().unwrap().clone();
    while !stop.load(Ordering::Relaxed) {
        request_id += 1;
        let out = propose_anywhere(&nodes(), acquire(&holder, request_id, 7), RETRY).await;
        let Ok(Outcome::Granted(grant)) = out else {
            continue;
        };
        let lease_id = grant.lease.lease_id;
        log.granted
            .insert(lease_id, (request_id, grant.lease.credit));
        log.last_acquire = Some((request_id, lease_id));
        if request_id % 3 == 0 {
            continue;
        }
        let release = Command::Release(Release {
            holder_id: holder.clone(),
            lease_id,
            final_used: 2,
            request_id,
        });
        let out = propose_anywhere(&nodes(), release, RETRY).await;
        assert!(
            matches!(out, Ok(Outcome::Released { reclaimed, .. }) if reclaimed == grant.lease.credit - 2),
            "release of {lease_id}: {out:?}"
        );
        log.released.push(lease_id);
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_loss_under_load_keeps_every_acknowledged_grant() {
    let mut cluster = Cluster::start(3, no_tuning).await;
    cluster.propose(policy(), RETRY).await.unwrap();
    let live = Arc::new(Mutex::new(cluster.live()));
    let stop = Arc::new(AtomicBool::new(false));
    let holders: Vec<_> = (0..4)
        .map(|i| {
            tokio::spawn(holder_loop(
                Arc::clone(&live),
                format!("h{i}"),
                Arc::clone(&stop),
            ))
        })
        .collect();

    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let old_leader = cluster.wait_leader(Duration::from_secs(5)).await;
    live.lock().unwrap().retain(|n| n.node_id() != old_leader);
    cluster.stop(old_leader).await;
    let new_leader = cluster.wait_leader(Duration::from_secs(10)).await;
    assert_ne!(new_leader, old_leader);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut logs = Vec::new();
    for h in holders {
        logs.push(h.await.unwrap());
    }
    let granted: usize = logs.iter().map(|l| l.granted.len()).sum();
    assert!(
        granted > 10,
        "too little load to mean anything: {granted} grants"
    );

    cluster.wait_converged(Duration::from_secs(5)).await;
    let leader = cluster.node(new_leader).clone();
    let ledgers: Vec<_> = cluster
        .live()
        .iter()
        .map(|n| n.read_local(|l| l.clone()))
        .collect();
    assert!(ledgers.iter().all(|l| l.conserved()));
    assert!(ledgers.windows(2).all(|w| w[0] == w[1]), "replicas differ");
    let ledger = &ledgers[0];

    let mut unreleased = 0;
    for (i, log) in logs.iter().enumerate() {
        let holder = format!("h{i}");
        for (&lease_id, &(_, credit)) in &log.granted {
            if log.released.contains(&lease_id) {
                let t = ledger.tombstone(lease_id).expect("released lease kept");
                assert_eq!(
                    (t.holder_id.as_str(), t.closed_as),
                    (holder.as_str(), ClosedAs::Released)
                );
            } else {
                let rec = ledger.lease(lease_id).expect("acknowledged grant lost");
                assert_eq!(
                    (rec.lease.holder_id.as_str(), rec.lease.credit),
                    (holder.as_str(), credit)
                );
                unreleased += credit;
            }
        }
        // A retry of the last acquire gets the lease it was first given, not a new one.
        let (request_id, lease_id) = log.last_acquire.expect("holder got a grant");
        let again = leader
            .propose(acquire(&holder, request_id, 7))
            .await
            .unwrap();
        let Ok(Outcome::Granted(g)) = again else {
            panic!("retry answered {again:?}")
        };
        assert_eq!(g.lease.lease_id, lease_id);
    }
    // Every unit on lease belongs to exactly one acknowledged, unreleased grant.
    assert_eq!(ledger.account(KEY).unwrap().outstanding, unreleased);
    assert_eq!(
        ledger.leases().count(),
        logs.iter()
            .map(|l| l.granted.len() - l.released.len())
            .sum::<usize>()
    );
    for node in cluster.live() {
        node.shutdown().await;
    }
}

/// The leader's replicated time after a tick it stamped. A leader elected a moment ago may
/// not have heard a quorum's heartbeat answers yet; its read waits for that, within bounds.
async fn stamped_now(node: &Node) -> Nanos {
    node.propose(Command::Tick).await.unwrap().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match node.read(|l| l.now()).await {
            Ok(now) => return now,
            Err(e) if Instant::now() < deadline => {
                eprintln!("read not confirmed yet: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the new leader never confirmed a read: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_time_continues_across_a_leader_change_without_running_ahead() {
    // Every node's wall clock is off by a different number of hours, so a new leader that
    // consulted its own wall clock would jump the timeline by an hour or more.
    let mut cluster = Cluster::start(3, no_tuning).await;
    let first = cluster.wait_leader(Duration::from_secs(5)).await;
    let started = Instant::now();
    let before = stamped_now(cluster.node(first)).await;
    cluster.stop(first).await;
    let second = cluster.wait_leader(Duration::from_secs(10)).await;
    let after = stamped_now(cluster.node(second)).await;
    let elapsed = started.elapsed();
    assert!(after >= before, "time went back: {before:?} -> {after:?}");
    let advanced = Duration::from_nanos(after.saturating_since(before));
    eprintln!(
        "LAG {:?} elapsed {:?}",
        elapsed.saturating_sub(advanced),
        elapsed
    );
    assert!(
        advanced <= elapsed,
        "timeline advanced {advanced:?} in {elapsed:?} of real time"
    );
    // The new leader did not stall for long either: it continued from the replicated time.
    assert!(
        elapsed - advanced < Duration::from_secs(2),
        "timeline lagged {:?}",
        elapsed - advanced
    );
    for node in cluster.live() {
        node.shutdown().await;
    }
}
