//! The allocator as a Raft cluster on simulated hosts: each host runs the production
//! `RaftNode` (sled storage in the host's own directory, Raft RPCs over simulated TCP) with
//! the production `LeaseServer` on the same endpoint, as `allocator::server` wires them.
//!
//! A host's program is started again from scratch after a crash; it reopens its storage
//! and rejoins the cluster with what its disk holds.

use super::hosts::{HostResult, TENANT};
use super::transport::{connect_sim, incoming};
use super::NetConfig;
use leasehold_allocator::raft::{
    NodeConfig, NodeHooks, NodeMetrics, RaftNode, TimeSource, TransportConfig,
};
use leasehold_allocator::replica::{LateReplica, Replica};
use leasehold_allocator::service::cluster_raft::RaftCluster;
use leasehold_allocator::service::ticker::run_ticker;
use leasehold_allocator::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::LedgerConfig;
use leasehold_proto::leasehold::v1::admin_service_server::AdminServiceServer;
use leasehold_proto::leasehold::v1::lease_service_server::LeaseServiceServer;
use openraft::ServerState;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The port of every allocator host's gRPC endpoint (Raft and lease service).
pub const ALLOCATOR_PORT: u16 = 7000;
/// Most allocator hosts in one cluster.
pub const CLUSTER_MAX: usize = 5;
/// How often the bootstrapping node tries to install the policy, and how many times.
const POLICY_RETRY_MS: u64 = 50;
const POLICY_ATTEMPTS_MAX: u32 = 400;

/// The name of allocator host `index` (node id `index + 1`).
pub fn allocator_host(index: usize) -> String {
    format!("allocator-{}", index + 1)
}

/// Where agents and peers reach allocator host `index`.
pub fn allocator_addr(index: usize) -> String {
    format!("{}:{ALLOCATOR_PORT}", allocator_host(index))
}

/// The Raft node id of allocator host `index`.
pub fn node_id(index: usize) -> u64 {
    index as u64 + 1
}

/// What every allocator host shares: where its disk is, its cluster's signing key, and the
/// slots its running node is published in for the run to inspect between steps.
#[derive(Clone)]
pub struct ClusterShared {
    pub data_root: PathBuf,
    pub signer: Arc<LeaseSigner>,
    pub nodes: NodeSlots,
    /// The delegated region's key and node, when the run has one.
    pub region_signer: Arc<LeaseSigner>,
    pub region: NodeSlots,
}

/// The latest node each allocator host started. A crashed host's slot keeps its last node,
/// whose state and metrics are frozen; the run knows which hosts are down.
#[derive(Clone, Default)]
pub struct NodeSlots(Arc<Mutex<BTreeMap<usize, RaftNode<AllocatorState>>>>);

impl NodeSlots {
    pub(super) fn set(&self, index: usize, node: RaftNode<AllocatorState>) {
        self.lock().insert(index, node);
    }

    /// The node host `index` last started, if any.
    pub fn get(&self, index: usize) -> Option<RaftNode<AllocatorState>> {
        self.lock().get(&index).cloned()
    }

    /// `f` of the node of every host in `up`.
    pub fn each_up<R>(
        &self,
        up: impl Fn(usize) -> bool,
        f: impl Fn(&RaftNode<AllocatorState>) -> R,
    ) -> Vec<R> {
        self.lock()
            .iter()
            .filter(|(i, _)| up(**i))
            .map(|(_, n)| f(n))
            .collect()
    }

    /// Metrics of the hosts in `up`.
    pub fn metrics(&self, up: impl Fn(usize) -> bool) -> Vec<(usize, NodeMetrics)> {
        self.lock()
            .iter()
            .filter(|(i, _)| up(**i))
            .map(|(i, n)| (*i, n.metrics()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, RaftNode<AllocatorState>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The leader among `metrics`: a node in the leader state, the highest term if a deposed
/// leader has not noticed yet. Returns (host index, node id, term).
pub fn leader_of(metrics: &[(usize, NodeMetrics)]) -> Option<(usize, u64, u64)> {
    metrics
        .iter()
        .filter(|(_, m)| m.state == ServerState::Leader)
        .max_by_key(|(_, m)| m.current_term)
        .map(|(i, m)| (*i, m.node_id, m.current_term))
}

/// A node's clocks on simulated time: tokio's virtual monotonic clock, and the simulation's
/// calendar (its fixed epoch plus simulated time) for the first stamp of a new cluster.
#[derive(Debug)]
struct SimTimeSource {
    origin: tokio::time::Instant,
}

impl TimeSource for SimTimeSource {
    fn mono_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn wall_unix_ns(&self) -> u64 {
        let since = turmoil::since_epoch().unwrap_or_default();
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// One simulated allocator node: where it is, which cluster and ledger it belongs to.
pub(super) struct NodeSpec {
    /// Host name; also the name of its directory under the run's data root.
    pub host: String,
    pub node_id: u64,
    /// `host:port` of its endpoint, as peers and clients reach it.
    pub addr: String,
    pub cluster_name: String,
    pub ledger: LedgerConfig,
}

/// The settings of a node: production defaults, a small page cache, and no background
/// flush (every acknowledged write is flushed explicitly anyway).
fn node_config(spec: &NodeSpec, cfg: &NetConfig, shared: &ClusterShared) -> NodeConfig {
    let dir = shared.data_root.join(&spec.host);
    let mut n = NodeConfig::new(spec.node_id, spec.addr.clone(), dir);
    n.cluster_name = spec.cluster_name.clone();
    n.sled.cache_capacity_bytes = 4 * 1024 * 1024;
    n.sled.flush_every_ms = None;
    n.heartbeat_interval_ms = cfg.raft_heartbeat_ms;
    // openraft draws each election timeout from an unseeded generator in [min, max): a
    // one-millisecond range makes it fixed, so a seed replays. Each node gets its own
    // timeout, spread over what production draws from, so that two followers of a lost
    // leader do not stand at the same instant and split the vote.
    let spread_ms = cfg.raft_heartbeat_ms * 5 / 3;
    n.election_timeout_min_ms = cfg.raft_heartbeat_ms * 5 + spread_ms * (spec.node_id % 3);
    n.election_timeout_max_ms = n.election_timeout_min_ms + 1;
    n
}

/// Starts (or restarts, from its storage) the node of `spec` with the lease service, signing
/// with `signer`, on the same endpoint, as `allocator::server` wires them.
pub(super) async fn start_node(
    spec: &NodeSpec,
    cfg: &NetConfig,
    shared: &ClusterShared,
    signer: Arc<LeaseSigner>,
) -> Result<RaftNode<AllocatorState>, Box<dyn std::error::Error>> {
    let late: LateReplica<RaftNode<AllocatorState>> = LateReplica::default();
    let lease = super::hosts::lease_server(late.clone(), signer)?;
    let cluster = Arc::new(RaftCluster {
        node: late.clone(),
        cluster_id: spec.cluster_name.clone(),
        level: spec.ledger.level.name().into(),
    });
    let admin = super::hosts::admin_server(late.clone(), cluster)?;
    let hooks = NodeHooks {
        transport: TransportConfig {
            connector: Some(Arc::new(connect_sim)),
            connect_timeout_ms: 500,
            ..TransportConfig::default()
        },
        time: Arc::new(SimTimeSource {
            origin: tokio::time::Instant::now(),
        }),
        services: Some(Box::new(move |router| {
            router
                .add_service(LeaseServiceServer::new(lease))
                .add_service(AdminServiceServer::new(admin))
        })),
        raft_auth: None,
        raft_cluster: None,
        listener_limits: Default::default(),
    };
    let node = RaftNode::start_with_incoming(
        node_config(spec, cfg, shared),
        hooks,
        AllocatorState::new(spec.ledger.clone()),
        incoming(ALLOCATOR_PORT).await?,
        std::future::pending(),
    )
    .await?;
    late.set(node.clone());
    Ok(node)
}

/// The program of allocator host `index` of the global cluster: starts (or restarts) its
/// node, bootstraps the cluster and its policy on the first start of the first host, and
/// proposes expiry ticks until the host crashes or the run ends.
pub async fn raft_allocator(index: usize, cfg: NetConfig, shared: ClusterShared) -> HostResult {
    let spec = NodeSpec {
        host: allocator_host(index),
        node_id: node_id(index),
        addr: allocator_addr(index),
        cluster_name: "global".into(),
        ledger: LedgerConfig::root("global"),
    };
    let node = start_node(&spec, &cfg, &shared, Arc::clone(&shared.signer)).await?;
    shared.nodes.set(index, node.clone());
    if index == 0 {
        let members = (0..cfg.cluster)
            .map(|i| (node_id(i), allocator_addr(i)))
            .collect();
        bootstrap(&node, members, Some(&cfg)).await?;
    }
    run_ticker(node, 100, std::future::pending()).await;
    Ok(())
}

/// Initialises a cluster of `members` and installs the run's policy when `policy` is given.
/// A node that was initialised before (a restart) refuses, and then there is nothing to do.
pub(super) async fn bootstrap(
    node: &RaftNode<AllocatorState>,
    members: BTreeMap<u64, String>,
    policy: Option<&NetConfig>,
) -> HostResult {
    if node.initialize(members).await.is_err() {
        return Ok(());
    }
    let Some(cfg) = policy else { return Ok(()) };
    let mut last = String::new();
    for _ in 0..POLICY_ATTEMPTS_MAX {
        let applied = node
            .propose(StateCommand::ApplyPolicy {
                yaml: cfg.policy_yaml(),
                shadow: false,
                effective_at_ns: 0,
                actor: "simulation".into(),
            })
            .await;
        match applied {
            Ok(StateOutput::Refused(e)) => return Err(format!("policy refused: {e}").into()),
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(POLICY_RETRY_MS)).await;
    }
    Err(format!("the policy for {TENANT} was never installed: {last}").into())
}

/// Whether the ledger of every node in `nodes` accounts for every unit.
pub fn all_conserved(nodes: &[RaftNode<AllocatorState>]) -> bool {
    nodes
        .iter()
        .all(|n| n.read_local(|s| s.ledger().conserved()))
}
