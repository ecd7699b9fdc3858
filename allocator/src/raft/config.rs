//! Settings of one allocator node and the errors of running it.

use std::path::PathBuf;

use thiserror::Error;

use crate::storage::{SledOptions, StorageLimits, StoreError};

/// Settings of one Raft node. Timing must be the same on every node of a cluster.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id; unique in the cluster and never reused for another data directory.
    pub node_id: u64,
    /// Where peers reach this node's Raft endpoint (`host:port`), as stored in membership.
    pub raft_addr: String,
    /// Directory of the node's durable log, vote and snapshot.
    pub data_dir: PathBuf,
    /// Name of the cluster, for logs.
    pub cluster_name: String,
    /// Leader heartbeat period, in milliseconds; also each append-entries RPC's deadline.
    pub heartbeat_interval_ms: u64,
    /// Lower bound of the randomised election timeout, in milliseconds.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the randomised election timeout, in milliseconds.
    pub election_timeout_max_ms: u64,
    /// Deadline of one install-snapshot chunk RPC, in milliseconds.
    pub install_snapshot_timeout_ms: u64,
    /// Build a snapshot after this many entries were applied since the last one.
    pub snapshot_logs_since_last: u64,
    /// Entries kept in the log behind the latest snapshot (for followers slightly behind).
    pub max_in_snapshot_log_to_keep: u64,
    /// Most entries in one append-entries RPC.
    pub max_payload_entries: u64,
    /// Largest snapshot chunk sent in one install-snapshot RPC, in bytes.
    pub snapshot_chunk_len_max_bytes: u64,
    /// Proposals waiting for the proposer; more are refused at once.
    pub proposals_queue_max: usize,
    /// Most commands replicated together in one log entry.
    pub batch_commands_max: usize,
    /// Most batches proposed but not yet answered; while this many are in flight, new
    /// commands gather into the next batch. One by default: openraft 0.9 appends each entry
    /// with an fsync of its own inside the Raft core, so a second entry in flight buys an
    /// extra fsync, not overlap; with one, whatever arrives during a round leaves together
    /// in the next (measured in docs/benchmarks.md: 1.6 to 2 times the grants and exact
    /// decisions per second of 8 in flight, at lower latency).
    pub batches_in_flight_max: usize,
    /// How long a proposal may wait for its batch to commit, in milliseconds.
    pub propose_timeout_ms: u64,
    /// How long a linearizable read may wait for the leader to confirm it still leads, in
    /// milliseconds.
    pub read_timeout_ms: u64,
    /// How long `shutdown` waits for the Raft endpoint to close its connections, in
    /// milliseconds.
    pub shutdown_timeout_ms: u64,
    /// Limits of the durable storage.
    pub storage: StorageLimits,
    /// Settings of the storage engine.
    pub sled: SledOptions,
}

impl NodeConfig {
    /// Production defaults for the node `node_id` reachable at `raft_addr`.
    pub fn new(node_id: u64, raft_addr: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            node_id,
            raft_addr: raft_addr.into(),
            data_dir: data_dir.into(),
            cluster_name: "leasehold".to_string(),
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1_000,
            install_snapshot_timeout_ms: 2_000,
            snapshot_logs_since_last: 10_000,
            max_in_snapshot_log_to_keep: 1_000,
            max_payload_entries: 300,
            snapshot_chunk_len_max_bytes: 3 * 1024 * 1024,
            proposals_queue_max: 10_000,
            batch_commands_max: 256,
            batches_in_flight_max: 1,
            propose_timeout_ms: 5_000,
            read_timeout_ms: 2_000,
            shutdown_timeout_ms: 2_000,
            storage: StorageLimits::default(),
            sled: SledOptions::default(),
        }
    }

    /// The openraft configuration, or which setting is unusable and why.
    pub fn raft_config(&self) -> Result<openraft::Config, NodeError> {
        let positive = [
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            (
                "install_snapshot_timeout_ms",
                self.install_snapshot_timeout_ms,
            ),
            ("snapshot_logs_since_last", self.snapshot_logs_since_last),
            ("max_payload_entries", self.max_payload_entries),
            (
                "snapshot_chunk_len_max_bytes",
                self.snapshot_chunk_len_max_bytes,
            ),
            ("proposals_queue_max", self.proposals_queue_max as u64),
            ("batch_commands_max", self.batch_commands_max as u64),
            ("batches_in_flight_max", self.batches_in_flight_max as u64),
            ("propose_timeout_ms", self.propose_timeout_ms),
            ("read_timeout_ms", self.read_timeout_ms),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(NodeError::InvalidConfig {
                field,
                reason: "must be at least 1".to_string(),
            });
        }
        if self.raft_addr.is_empty() {
            return Err(NodeError::InvalidConfig {
                field: "raft_addr",
                reason: "is empty; peers need `host:port`".to_string(),
            });
        }
        let config = openraft::Config {
            cluster_name: self.cluster_name.clone(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            install_snapshot_timeout: self.install_snapshot_timeout_ms,
            max_payload_entries: self.max_payload_entries,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_logs_since_last),
            max_in_snapshot_log_to_keep: self.max_in_snapshot_log_to_keep,
            snapshot_max_chunk_size: self.snapshot_chunk_len_max_bytes,
            ..Default::default()
        };
        config.validate().map_err(|e| NodeError::InvalidConfig {
            field: "election_timeout_min_ms/election_timeout_max_ms/heartbeat_interval_ms",
            reason: e.to_string(),
        })
    }
}

/// Failure to start, administer or stop a node.
#[derive(Debug, Error)]
pub enum NodeError {
    /// A setting is unusable.
    #[error("node setting `{field}` is invalid: {reason}")]
    InvalidConfig {
        /// The offending setting.
        field: &'static str,
        /// Why it is unusable.
        reason: String,
    },
    /// The initial state cannot be encoded, so no snapshot of it could ever be taken.
    #[error("initial state does not encode with postcard: {0}")]
    StateEncoding(String),
    /// The durable storage failed to open.
    #[error("storage at {dir} failed to open: {source}")]
    Storage {
        /// The data directory.
        dir: PathBuf,
        /// The storage failure.
        source: StoreError,
    },
    /// The Raft core stopped or failed.
    #[error("raft node {node_id} stopped: {reason}")]
    Stopped {
        /// This node.
        node_id: u64,
        /// What openraft reported.
        reason: String,
    },
    /// The operation must run on the leader.
    #[error("not the leader; the leader is {}", leader_addr.as_deref().unwrap_or("unknown"))]
    NotLeader {
        /// The leader's id, if known.
        leader_id: Option<u64>,
        /// The leader's Raft address, if known.
        leader_addr: Option<String>,
    },
    /// Raft refused the request (e.g. already initialised, membership change in progress).
    #[error("{op} refused: {reason}")]
    Refused {
        /// The operation.
        op: &'static str,
        /// openraft's reason.
        reason: String,
    },
    /// The operation did not finish in time.
    #[error("{op} did not finish within {timeout_ms} ms")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The deadline that passed.
        timeout_ms: u64,
    },
}
