//! [`RaftNode`]: one allocator node, its Raft endpoint and its proposer.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_proto::transport::{limited, AuthMode, ListenerLimits};
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{ChangeMembers, Raft, ServerState};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tonic::transport::server::{Connected, Router};

use super::batching::{forward_error, linearizable_error, Proposal, Proposer, ProposerSettings};
use super::campaign::{run_campaigner, CampaignTimings};
use super::config::{NodeConfig, NodeError};
use super::machine::{encode_snapshot, MachineApplier, SharedMachine};
use super::network::{NetworkFactory, TransportConfig};
use super::peers::{track_peers, PeerProgress, PeerTracker};
use super::time::{SystemTimeSource, TimeSource};
use super::types::{NodeAddr, TypeConfig};
use crate::replica::{Machine, Replica, ReplicaError};
use crate::storage::open_sled;

/// What a node is plugged into besides its settings: transport security and clocks.
pub struct NodeHooks {
    /// How peers are reached and how the Raft endpoint is served.
    pub transport: TransportConfig,
    /// The node's monotonic and wall clocks.
    pub time: Arc<dyn TimeSource>,
    /// More gRPC services to serve on the Raft endpoint's listener (the lease and admin
    /// services), so a node has one address for peers and clients alike.
    pub services: Option<ServiceHook>,
    /// When set, only callers this mode identifies as allocators may call Raft RPCs.
    pub raft_auth: Option<AuthMode>,
    /// With `raft_auth`: the cluster whose members alone may call Raft RPCs, as their
    /// certificates name them (`<cluster>-<node id>`, the node in the membership this node
    /// knows, or any node of the cluster while it knows none yet).
    pub raft_cluster: Option<String>,
    /// Bounds on the connections the node's listener accepts (when started on a listener).
    pub listener_limits: ListenerLimits,
}

/// Adds services to the router that serves the Raft endpoint.
pub type ServiceHook = Box<dyn FnOnce(Router) -> Router + Send>;

impl Default for NodeHooks {
    fn default() -> Self {
        Self {
            transport: TransportConfig::default(),
            time: SystemTimeSource::shared(),
            services: None,
            raft_auth: None,
            raft_cluster: None,
            listener_limits: ListenerLimits::default(),
        }
    }
}

/// A node's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMetrics {
    /// This node.
    pub node_id: u64,
    /// Leader, follower, candidate, learner or shut down.
    pub state: ServerState,
    /// Current Raft term.
    pub current_term: u64,
    /// The leader this node knows of.
    pub leader_id: Option<u64>,
    /// The known leader's Raft address.
    pub leader_addr: Option<String>,
    /// Index of the last entry in the local log.
    pub last_log_index: Option<u64>,
    /// Index of the last entry applied to the local state.
    pub last_applied_index: Option<u64>,
    /// Last index covered by the local snapshot.
    pub snapshot_index: Option<u64>,
    /// Last index removed from the local log.
    pub purged_index: Option<u64>,
    /// Voting members and their addresses.
    pub voters: BTreeMap<u64, String>,
    /// Non-voting members and their addresses.
    pub learners: BTreeMap<u64, String>,
    /// Replication progress of each other member, known only while this node leads.
    pub peers: BTreeMap<u64, PeerProgress>,
}

/// Handle to one running node. Clones share the node; it implements [`Replica`].
pub struct RaftNode<M: Machine> {
    inner: Arc<Inner<M>>,
}

/// The replica side of a [`RaftNode`], as services use it.
pub type RaftReplica<M> = RaftNode<M>;

impl<M: Machine> Clone for RaftNode<M> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<M: Machine> {
    config: NodeConfig,
    raft: Raft<TypeConfig>,
    shared: Arc<SharedMachine<M>>,
    proposals: mpsc::Sender<Proposal<M>>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    peers: Arc<PeerTracker>,
    /// Set once the node has stopped; every caller of `shutdown` waits for the first one.
    stopped: tokio::sync::OnceCell<()>,
}

impl<M: Machine> RaftNode<M> {
    /// Starts a plaintext node with the system clocks; see [`RaftNode::start_with`].
    pub async fn start(
        config: NodeConfig,
        initial: M,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, NodeError> {
        Self::start_with(config, NodeHooks::default(), initial, listener, shutdown).await
    }

    /// Opens the node's storage in `config.data_dir` (restoring its last snapshot over
    /// `initial`, the empty state), serves Raft RPCs on `listener` and runs until `shutdown`
    /// completes or [`RaftNode::shutdown`] is called. A new cluster also needs
    /// [`RaftNode::initialize`] on one node.
    pub async fn start_with(
        config: NodeConfig,
        hooks: NodeHooks,
        initial: M,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, NodeError> {
        let incoming = limited(listener, hooks.listener_limits);
        Self::start_with_incoming(config, hooks, initial, incoming, shutdown).await
    }

    /// [`RaftNode::start_with`] serving the connections `incoming` yields instead of a TCP
    /// listener's: an in-process pipe, a simulated network, a listener set up elsewhere.
    pub async fn start_with_incoming<S, IO, IE>(
        config: NodeConfig,
        hooks: NodeHooks,
        initial: M,
        incoming: S,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, NodeError>
    where
        S: Stream<Item = Result<IO, IE>> + Send + 'static,
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
        IO::ConnectInfo: leasehold_proto::transport::PeerOf,
        IE: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
    {
        let raft_config = Arc::new(config.raft_config()?);
        // A chunk travels with its metadata in one message; it must fit with room to spare.
        let chunk_bytes =
            usize::try_from(config.snapshot_chunk_len_max_bytes).unwrap_or(usize::MAX);
        if chunk_bytes.saturating_mul(2) > hooks.transport.message_len_max_bytes {
            return Err(NodeError::InvalidConfig {
                field: "snapshot_chunk_len_max_bytes",
                reason: format!(
                    "{chunk_bytes} bytes leaves no room for metadata within the transport's \
                     message_len_max_bytes = {}; keep it at most half of that",
                    hooks.transport.message_len_max_bytes
                ),
            });
        }
        encode_snapshot(&initial, 0).map_err(|e| NodeError::StateEncoding(e.to_string()))?;
        let shared = Arc::new(SharedMachine::new(initial));
        let applier = MachineApplier::new(Arc::clone(&shared), Arc::clone(&hooks.time));
        let (log, state_machine) = {
            let (dir, sled, limits) = (
                config.data_dir.clone(),
                config.sled.clone(),
                config.storage.clone(),
            );
            // Opening may wait for a file lock that a previous run in this process still holds.
            crate::storage::error::blocking("open storage", move || {
                open_sled(&dir, &sled, applier, limits)
            })
            .await
            .map_err(|source| NodeError::Storage {
                dir: config.data_dir.clone(),
                source,
            })?
        };
        let received = Arc::clone(shared.received_time());
        let time = Arc::clone(&hooks.time);
        let log = log.with_append_observer(Arc::new(move |leader_time_ns| {
            received.record_furthest(leader_time_ns, time.mono_ns());
        }));
        let network = NetworkFactory::new(config.node_id, hooks.transport.clone());
        let contact = network.contact();
        let raft = Raft::new(config.node_id, raft_config, network, log, state_machine)
            .await
            .map_err(|e| stopped(config.node_id, e))?;

        let (stop, _) = watch::channel(false);
        let (proposals, queue) = mpsc::channel(config.proposals_queue_max);
        let proposer = Proposer::new(
            proposer_settings(&config),
            raft.clone(),
            Arc::clone(&shared),
            hooks.time,
        );
        let mut tasks = vec![tokio::spawn(proposer.run(queue, stop.subscribe()))];
        tasks.push(super::endpoint::serve(
            &config,
            &hooks.transport,
            (hooks.services, hooks.raft_auth, hooks.raft_cluster),
            (raft.clone(), Arc::clone(&contact)),
            incoming,
            stop.subscribe(),
        )?);
        let timings = CampaignTimings::of(&config);
        let campaigner = run_campaigner(raft.clone(), contact, timings, stop.subscribe());
        tasks.push(tokio::spawn(campaigner));
        let peers = Arc::new(PeerTracker::default());
        tasks.push(tokio::spawn(track_peers(
            raft.clone(),
            Arc::clone(&peers),
            stop.subscribe(),
        )));
        let node = Self {
            inner: Arc::new(Inner {
                config,
                raft,
                shared,
                proposals,
                stop,
                tasks: Mutex::new(tasks),
                peers,
                stopped: tokio::sync::OnceCell::new(),
            }),
        };
        let on_signal = node.clone();
        tokio::spawn(async move {
            let mut stopped = on_signal.inner.stop.subscribe();
            let signalled = tokio::select! {
                () = shutdown => true,
                _ = stopped.wait_for(|s| *s) => false,
            };
            if signalled {
                on_signal.shutdown().await;
            }
        });
        Ok(node)
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.inner.config.node_id
    }

    /// The openraft handle, for operations this type does not wrap.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.inner.raft
    }

    /// Bootstraps a new cluster with `members` (id → Raft address) as its voters. Call it on
    /// one node of a cluster that never had a membership.
    /// Whether this node's storage already holds a membership (it was initialised, or it
    /// joined a cluster), so that initialising again would be refused.
    pub async fn is_initialized(&self) -> bool {
        // A fatal error here means the node is stopping; initialising would fail too.
        self.inner.raft.is_initialized().await.unwrap_or(true)
    }

    pub async fn initialize(&self, members: BTreeMap<u64, String>) -> Result<(), NodeError> {
        let members: BTreeMap<u64, NodeAddr> = members
            .into_iter()
            .map(|(id, addr)| (id, NodeAddr { addr }))
            .collect();
        self.inner
            .raft
            .initialize(members)
            .await
            .map_err(|e| match e {
                RaftError::APIError(InitializeError::NotAllowed(e)) => NodeError::Refused {
                    op: "initialize",
                    reason: e.to_string(),
                },
                RaftError::APIError(InitializeError::NotInMembers(e)) => NodeError::Refused {
                    op: "initialize",
                    reason: e.to_string(),
                },
                RaftError::Fatal(f) => stopped(self.node_id(), f),
            })
    }

    /// Adds a non-voting member that receives the log; with `blocking`, returns once it has
    /// caught up. Leader only.
    pub async fn add_learner(
        &self,
        node_id: u64,
        addr: String,
        blocking: bool,
    ) -> Result<(), NodeError> {
        let res = self
            .inner
            .raft
            .add_learner(node_id, NodeAddr { addr }, blocking)
            .await;
        res.map(drop)
            .map_err(|e| self.write_error("add_learner", e))
    }

    /// Makes `voters` the voting members: promotes learners among them and demotes the rest
    /// (kept as learners if `keep_removed_as_learners`, else removed). Leader only.
    pub async fn change_membership(
        &self,
        voters: BTreeSet<u64>,
        keep_removed_as_learners: bool,
    ) -> Result<(), NodeError> {
        let res = self
            .inner
            .raft
            .change_membership(
                ChangeMembers::ReplaceAllVoters(voters),
                keep_removed_as_learners,
            )
            .await;
        res.map(drop)
            .map_err(|e| self.write_error("change_membership", e))
    }

    fn write_error(
        &self,
        op: &'static str,
        e: RaftError<u64, ClientWriteError<u64, NodeAddr>>,
    ) -> NodeError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                match forward_error(&self.inner.raft, f.leader_id, f.leader_node) {
                    ReplicaError::NotLeader {
                        leader_id,
                        leader_addr,
                    } => NodeError::NotLeader {
                        leader_id,
                        leader_addr,
                    },
                    other => NodeError::Refused {
                        op,
                        reason: other.to_string(),
                    },
                }
            }
            RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => NodeError::Refused {
                op,
                reason: e.to_string(),
            },
            RaftError::Fatal(f) => stopped(self.node_id(), f),
        }
    }

    /// What this node knows about the cluster right now.
    pub fn metrics(&self) -> NodeMetrics {
        let m = self.inner.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let addr_of = |id: &u64| membership.get_node(id).map(|n| n.addr.clone());
        let voters: BTreeMap<u64, String> = membership
            .voter_ids()
            .filter_map(|id| addr_of(&id).map(|a| (id, a)))
            .collect();
        let learners: BTreeMap<u64, String> = membership
            .learner_ids()
            .filter_map(|id| addr_of(&id).map(|a| (id, a)))
            .collect();
        let now = std::time::Instant::now();
        let peers = voters
            .keys()
            .chain(learners.keys())
            .filter(|id| **id != m.id)
            .filter_map(|id| Some((*id, self.inner.peers.progress(*id, now)?)))
            .collect();
        NodeMetrics {
            node_id: m.id,
            state: m.state,
            current_term: m.current_term,
            leader_id: m.current_leader,
            leader_addr: m.current_leader.as_ref().and_then(addr_of),
            last_log_index: m.last_log_index,
            last_applied_index: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            voters,
            learners,
            peers,
        }
    }

    /// Runs `f` on this node's applied state without confirming it is current: a follower's
    /// state may lag the leader's. For diagnostics and tests; services use [`Replica::read`].
    pub fn read_local<R>(&self, f: impl FnOnce(&M) -> R) -> R {
        f(&self.inner.shared.read())
    }

    /// Stops the proposer (queued proposals fail as unavailable), the Raft core and the Raft
    /// endpoint. Idempotent: a second caller (the shutdown signal and the binary both ask)
    /// waits for the first to finish.
    pub async fn shutdown(&self) {
        self.inner.stopped.get_or_init(|| self.stop_once()).await;
    }

    async fn stop_once(&self) {
        self.inner.stop.send_replace(true);
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(node_id = self.node_id(), error = %e, "raft core ended abnormally");
        }
        let tasks =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        let wait = Duration::from_millis(self.inner.config.shutdown_timeout_ms);
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(wait, task).await.is_err() {
                tracing::warn!(
                    node_id = self.node_id(),
                    "task did not stop in time; aborted"
                );
                abort.abort();
            }
        }
    }
}

fn stopped(node_id: u64, e: impl std::fmt::Display) -> NodeError {
    NodeError::Stopped {
        node_id,
        reason: e.to_string(),
    }
}

fn proposer_settings(config: &NodeConfig) -> ProposerSettings {
    ProposerSettings {
        node_id: config.node_id,
        batch_commands_max: config.batch_commands_max,
        batches_in_flight_max: config.batches_in_flight_max,
        propose_timeout: Duration::from_millis(config.propose_timeout_ms),
        catch_up_timeout: Duration::from_millis(config.read_timeout_ms),
        quorum_silence_max_ms: config.election_timeout_max_ms,
    }
}

impl<M: Machine> Replica<M> for RaftNode<M> {
    fn propose(
        &self,
        command: M::Command,
    ) -> impl Future<Output = Result<M::Output, ReplicaError>> + Send {
        let (reply, answer) = oneshot::channel();
        let queued = self.inner.proposals.try_send(Proposal { command, reply });
        async move {
            match queued {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(ReplicaError::Unavailable("queue full".into()))
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return Err(ReplicaError::Unavailable("node shutting down".into()))
                }
            }
            answer.await.unwrap_or_else(|_| {
                Err(ReplicaError::Unknown(
                    "proposer stopped before answering".into(),
                ))
            })
        }
    }

    fn peek<R>(&self, f: impl FnOnce(&M) -> R) -> Option<R> {
        Some(self.read_local(f))
    }

    fn read<R, F>(&self, f: F) -> impl Future<Output = Result<R, ReplicaError>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&M) -> R + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        async move {
            let timeout = Duration::from_millis(inner.config.read_timeout_ms);
            match tokio::time::timeout(timeout, inner.raft.ensure_linearizable()).await {
                Ok(Ok(_)) => Ok(f(&inner.shared.read())),
                Ok(Err(e)) => Err(linearizable_error(&inner.raft, e)),
                Err(_) => Err(ReplicaError::Unavailable(format!(
                    "leadership not confirmed within read_timeout_ms = {}",
                    timeout.as_millis()
                ))),
            }
        }
    }
}
