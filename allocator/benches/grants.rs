//! Load generator: lease grants per second through a 3-node cluster on loopback, with every
//! log append fsynced before it is acknowledged.
//!
//! `cargo bench -p leasehold-allocator --bench grants -- [--seconds S] [--clients N] [--renew]`
//!
//! By default each client loops: acquire a lease on one of many keys, then release it (two
//! replicated commands per grant). With `--renew` each client holds one lease and renews it
//! for more credit, as holders do in steady state (one command per grant). Reports grants/s
//! and the latency of each grant (p50, p99, max).

mod load;

use leasehold_allocator::raft::{NodeConfig, RaftNode};
use leasehold_allocator::replica::Replica;
use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, Outcome, PolicyParams, Release, Report,
};
use leasehold_common::rate::Rate;
use load::{arg, Latencies};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn cluster(dirs: &[tempfile::TempDir]) -> Vec<RaftNode<Ledger>> {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let mut nodes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let mut c = NodeConfig::new(i as u64 + 1, addrs[i].clone(), dirs[i].path());
        c.heartbeat_interval_ms = 50;
        c.election_timeout_min_ms = 300;
        c.election_timeout_max_ms = 600;
        let n = RaftNode::start(
            c,
            Ledger::new(LedgerConfig::root("bench")),
            l,
            std::future::pending(),
        )
        .await
        .unwrap();
        nodes.push(n);
    }
    let members: BTreeMap<u64, String> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| (i as u64 + 1, a.clone()))
        .collect();
    nodes[0].initialize(members).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while nodes[0].metrics().leader_id.is_none() {
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    nodes
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let seconds = arg("--seconds", 10);
    let clients = arg("--clients", 256);
    // `--renew`: each client holds one lease and renews it for more credit (one replicated
    // command per grant, the steady state of holders); otherwise acquire → release cycles
    // (two commands per grant).
    let renew = std::env::args().any(|a| a == "--renew");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = cluster(&dirs).await;
    let leader_id = nodes[0].metrics().leader_id.unwrap();
    let leader = nodes[(leader_id - 1) as usize].clone();
    let params = PolicyParams {
        policy_id: "p".into(),
        version: 1,
        rate: Rate::per_second(1_000_000_000).unwrap(),
        burst: 1_000_000_000,
        lease: LeaseParams {
            max_credit: 1_000,
            ..LeaseParams::default()
        },
        weights: Default::default(),
        window: None,
        owner: Default::default(),
        exact: false,
    };
    leader
        .propose(Command::PutPolicy(params))
        .await
        .unwrap()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Latencies::run(seconds, Arc::clone(&stop), || {
        (0..clients)
            .map(|c| {
                let (leader, stop) = (leader.clone(), Arc::clone(&stop));
                tokio::spawn(async move {
                    if renew {
                        renewals(leader, c, stop).await
                    } else {
                        acquire_release(leader, c, stop).await
                    }
                })
            })
            .collect()
    })
    .await;
    let conserved = leader.read(|l| l.conserved()).await.unwrap();
    let mode = if renew {
        "renewals granting credit, one command each"
    } else {
        "acquire → release, two commands each"
    };
    println!("3-node cluster, fsync on append, {clients} clients, {seconds} s, {mode}");
    latencies.print("grant");
    println!("ledger conserved on the leader: {conserved}");
    for n in nodes {
        n.shutdown().await;
    }
}

fn acquire_cmd(c: u64, request_id: u64, key: String) -> Command {
    Command::Acquire(Acquire {
        holder_id: format!("h{c}"),
        policy_id: "p".into(),
        key,
        want_credit: 10,
        demand_milli_per_sec: 0,
        request_id,
        priority: 0,
    })
}

/// Acquire a lease on one of 1 000 keys, release it; the acquire's latency per grant.
async fn acquire_release(leader: RaftNode<Ledger>, c: u64, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let mut request = 0u64;
    while !stop.load(Ordering::Relaxed) {
        request += 1;
        let t = Instant::now();
        let acquire = acquire_cmd(c, request, format!("k{}", c % 1_000));
        let Ok(Ok(Outcome::Granted(g))) = leader.propose(acquire).await else {
            continue;
        };
        latencies.push(t.elapsed());
        request += 1;
        let release = Command::Release(Release {
            holder_id: format!("h{c}"),
            lease_id: g.lease.lease_id,
            final_used: 5,
            request_id: request,
        });
        let _ = leader.propose(release).await;
    }
    latencies
}

/// Hold one lease on an own key and renew it for 10 more units each time, reporting all
/// credit so far as spent; the latency of each renewal that granted credit.
async fn renewals(leader: RaftNode<Ledger>, c: u64, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let Ok(Ok(Outcome::Granted(g))) = leader.propose(acquire_cmd(c, 1, format!("r{c}"))).await
    else {
        return latencies;
    };
    let (lease_id, mut credit, mut request) = (g.lease.lease_id, g.lease.credit, 1u64);
    while !stop.load(Ordering::Relaxed) {
        request += 1;
        let report = Command::Report(Report {
            holder_id: format!("h{c}"),
            lease_id,
            used: credit,
            return_credit: 0,
            want_credit: 10,
            demand_milli_per_sec: 0,
            request_id: request,
            priority: 0,
        });
        let t = Instant::now();
        if let Ok(Ok(Outcome::Granted(g))) = leader.propose(report).await {
            if g.added > 0 {
                latencies.push(t.elapsed());
            }
            credit = g.lease.credit;
        }
    }
    latencies
}
