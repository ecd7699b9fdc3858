//! Raft integration of the allocator: the openraft type configuration and the opaque command and
//! response payloads replicated through the log.

pub mod types;

pub use types::{
    Entry, LogId, NodeAddr, RaftCommand, RaftResponse, Snapshot, SnapshotMeta, StorageError,
    StoredMembership, TypeConfig, Vote,
};
