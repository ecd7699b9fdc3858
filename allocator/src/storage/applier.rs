//! The application side of the replicated state machine.
//!
//! The Raft state machine handles log ids, membership, snapshots and persistence; everything about
//! what a command *means* lives behind [`Applier`].

use thiserror::Error;

/// Failure to restore application state from a snapshot.
#[derive(Debug, Error)]
pub enum ApplierError {
    /// The snapshot bytes could not be decoded into application state.
    #[error("snapshot of {len_bytes} bytes is not valid application state: {reason}")]
    InvalidSnapshot {
        /// Size of the rejected snapshot.
        len_bytes: usize,
        /// Why the bytes were rejected.
        reason: String,
    },
}

/// Deterministic application logic driven by committed Raft commands.
///
/// Implementations must be deterministic: the same sequence of `apply` calls (with the same
/// indexes, times and payloads) on the same restored state must yield the same state and
/// responses on every replica. They must not read clocks or do I/O.
pub trait Applier: Send + Sync + 'static {
    /// Applies one committed command; `leader_time_ns` is the never-decreasing time stamped by the leader.
    fn apply(&mut self, log_index: u64, leader_time_ns: u64, payload: &[u8]) -> Vec<u8>;

    /// Serialises the complete application state.
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the complete application state with a snapshot taken by [`Applier::snapshot`].
    /// Nothing of the previous state may survive.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), ApplierError>;
}
