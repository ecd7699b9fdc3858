//! The openraft type configuration shared by the log store, the state machine and the network.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// Address book entry of one allocator node, as stored in Raft membership.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// Where peers reach the node's Raft endpoint (`host:port`).
    pub addr: String,
}

/// A replicated command. The payload is opaque to Raft; the application decodes it when applying.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftCommand {
    /// Application-encoded command.
    pub payload: Vec<u8>,
    /// The leader's clock reading when it proposed the command, in nanoseconds. Every replica
    /// applies the command with this time instead of reading its own clock, so replicas agree.
    pub leader_time_ns: u64,
}

/// The application's answer to one applied command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftResponse {
    /// Application-encoded response; empty for blank and membership entries.
    pub payload: Vec<u8>,
}

openraft::declare_raft_types!(
    /// Type configuration of the allocator's Raft group.
    pub TypeConfig:
        D = RaftCommand,
        R = RaftResponse,
        NodeId = u64,
        Node = NodeAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry of the allocator's Raft group.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id of the allocator's Raft group.
pub type LogId = openraft::LogId<u64>;
/// A vote of the allocator's Raft group.
pub type Vote = openraft::Vote<u64>;
/// Membership as last applied, with the id of the entry that carried it.
pub type StoredMembership = openraft::StoredMembership<u64, NodeAddr>;
/// Metadata of a snapshot of the allocator's state machine.
pub type SnapshotMeta = openraft::SnapshotMeta<u64, NodeAddr>;
/// A snapshot of the allocator's state machine.
pub type Snapshot = openraft::Snapshot<TypeConfig>;
/// Storage error as openraft expects it.
pub type StorageError = openraft::StorageError<u64>;
