//! In-process allocator clusters on loopback sockets for the cluster tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_allocator::raft::{
    NodeConfig, NodeHooks, RaftNode, SystemTimeSource, TimeSource, TransportConfig,
};
use leasehold_allocator::replica::{Replica, ReplicaError};
use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, LedgerError, Outcome, PolicyParams,
};
use leasehold_common::rate::Rate;
use openraft::ServerState;
use tempfile::TempDir;
use tokio::net::TcpListener;

pub type Node = RaftNode<Ledger>;
pub type LedgerOutput = Result<Outcome, LedgerError>;

pub const POLICY: &str = "p";
pub const KEY: &str = "k";

/// The system clocks, except that the wall clock is `wall_offset_ns` ahead: it proves a node's
/// wall clock plays no part once the timeline exists.
pub struct SkewedTime {
    inner: SystemTimeSource,
    wall_offset_ns: u64,
}

impl TimeSource for SkewedTime {
    fn mono_ns(&self) -> u64 {
        self.inner.mono_ns()
    }
    fn wall_unix_ns(&self) -> u64 {
        self.inner.wall_unix_ns() + self.wall_offset_ns
    }
}

/// Short timings so elections and snapshots happen within a test's time budget.
pub fn test_config(node_id: u64, addr: &str, dir: &std::path::Path) -> NodeConfig {
    let mut c = NodeConfig::new(node_id, addr, dir);
    c.cluster_name = "test".into();
    c.heartbeat_interval_ms = 50;
    c.election_timeout_min_ms = 250;
    c.election_timeout_max_ms = 500;
    c.propose_timeout_ms = 2_000;
    c.read_timeout_ms = 1_000;
    c.sled.flush_every_ms = None;
    c.sled.cache_capacity_bytes = 4 * 1024 * 1024;
    c
}

pub struct Member {
    pub id: u64,
    pub addr: String,
    pub dir: TempDir,
    pub node: Option<Node>,
}

pub struct Cluster {
    pub members: Vec<Member>,
    pub tune: fn(&mut NodeConfig),
}

pub fn no_tuning(_: &mut NodeConfig) {}

impl Cluster {
    /// Starts `n` nodes (ids 1..=n) and bootstraps them as one cluster.
    pub async fn start(n: u64, tune: fn(&mut NodeConfig)) -> Cluster {
        let mut members = Vec::new();
        let mut listeners = Vec::new();
        for id in 1..=n {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            members.push(Member {
                id,
                addr,
                dir: tempfile::tempdir().unwrap(),
                node: None,
            });
            listeners.push(listener);
        }
        let mut cluster = Cluster { members, tune };
        for (i, listener) in listeners.into_iter().enumerate() {
            cluster.boot(i as u64 + 1, listener).await;
        }
        let all: BTreeMap<u64, String> = cluster
            .members
            .iter()
            .map(|m| (m.id, m.addr.clone()))
            .collect();
        cluster.node(1).initialize(all).await.unwrap();
        cluster.wait_leader(Duration::from_secs(10)).await;
        cluster
    }

    async fn boot(&mut self, id: u64, listener: TcpListener) {
        let m = &mut self.members[(id - 1) as usize];
        let mut config = test_config(id, &m.addr, m.dir.path());
        (self.tune)(&mut config);
        let hooks = NodeHooks {
            transport: TransportConfig::default(),
            time: Arc::new(SkewedTime {
                inner: SystemTimeSource::new(),
                wall_offset_ns: id * 3_600_000_000_000,
            }),
            ..NodeHooks::default()
        };
        let initial = Ledger::new(LedgerConfig::root("cluster"));
        let node = RaftNode::start_with(config, hooks, initial, listener, std::future::pending())
            .await
            .unwrap();
        m.node = Some(node);
    }

    pub fn node(&self, id: u64) -> &Node {
        self.members[(id - 1) as usize]
            .node
            .as_ref()
            .expect("node is running")
    }

    pub fn live(&self) -> Vec<Node> {
        self.members.iter().filter_map(|m| m.node.clone()).collect()
    }

    pub async fn stop(&mut self, id: u64) {
        let node = self.members[(id - 1) as usize].node.take().unwrap();
        node.shutdown().await;
    }

    /// Restarts a stopped node from its data directory on its old address.
    pub async fn restart(&mut self, id: u64) {
        let addr = self.members[(id - 1) as usize].addr.clone();
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(&addr).await {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("rebinding {addr}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot rebind {addr}: {e}"),
            }
        };
        self.boot(id, listener).await;
    }

    /// The id of the leader that every running node agrees on.
    pub async fn wait_leader(&self, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        loop {
            let live = self.live();
            let leaders: Vec<u64> = live
                .iter()
                .filter(|n| n.metrics().state == ServerState::Leader)
                .map(|n| n.node_id())
                .collect();
            if let [leader] = leaders[..] {
                if live.iter().all(|n| n.metrics().leader_id == Some(leader)) {
                    return leader;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Proposes on whichever node leads, retrying while leadership moves.
    pub async fn propose(&self, command: Command, within: Duration) -> LedgerOutput {
        propose_anywhere(&self.live(), command, within).await
    }

    /// Waits until every running node has applied the leader's last log index.
    pub async fn wait_converged(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let applied: Vec<(Option<u64>, Option<u64>)> = self
                .live()
                .iter()
                .map(|n| {
                    let m = n.metrics();
                    (m.last_log_index, m.last_applied_index)
                })
                .collect();
            let target = applied.iter().filter_map(|a| a.0).max();
            if applied.iter().all(|a| a.1 == target && a.0 == target) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nodes did not converge: {applied:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Proposes `command` on the current leader among `nodes`, retrying the same command (so the
/// same request id) until it is answered or `within` passes.
pub async fn propose_anywhere(nodes: &[Node], command: Command, within: Duration) -> LedgerOutput {
    let deadline = Instant::now() + within;
    loop {
        let leader = nodes
            .iter()
            .find(|n| n.metrics().state == ServerState::Leader);
        if let Some(leader) = leader {
            match leader.propose(command.clone()).await {
                Ok(out) => return out,
                Err(
                    ReplicaError::NotLeader { .. }
                    | ReplicaError::Unavailable(_)
                    | ReplicaError::Unknown(_),
                ) => {}
            }
        }
        assert!(
            Instant::now() < deadline,
            "command not answered within {within:?}: {command:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn policy() -> Command {
    Command::PutPolicy(PolicyParams {
        weights: Default::default(),
        window: None,
        owner: Default::default(),
        exact: false,
        policy_id: POLICY.into(),
        version: 1,
        rate: Rate::per_second(1_000_000).unwrap(),
        burst: 100_000_000,
        lease: LeaseParams {
            ttl_ms: 600_000,
            min_credit: 1,
            max_credit: 1_000_000,
            reserve_ppm: 0,
            reserve_priority_min: 8,
            refresh_horizon_ms: 2_000,
        },
    })
}

pub fn acquire(holder: &str, request_id: u64, want: u64) -> Command {
    Command::Acquire(Acquire {
        holder_id: holder.into(),
        policy_id: POLICY.into(),
        key: KEY.into(),
        want_credit: want,
        demand_milli_per_sec: 0,
        request_id,
        priority: 5,
    })
}
