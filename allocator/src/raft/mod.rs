//! Raft integration of the allocator: one node of a replicated allocator cluster.
//!
//! # The node
//!
//! A [`RaftNode`] runs openraft 0.9 over the durable storage of [`crate::storage`] and applies
//! committed entries to a [`Machine`](crate::replica::Machine) (the credit ledger in production)
//! through [`MachineApplier`]. Peers talk over the `leasehold.v1.RaftService` gRPC API, whose
//! messages are openraft's own types encoded with postcard ([`network`], [`service`]); the
//! transport takes client and server TLS configs and an endpoint hook so mutual TLS can be plugged
//! in. The node implements [`Replica`](crate::replica::Replica), so services run unchanged on a
//! cluster or on a local replica.
//!
//! # Time
//!
//! The machine never reads a clock: every log entry carries `leader_time_ns`, stamped by the
//! leader, and every replica applies the entry at that time. The timeline must never go back and
//! must never run faster than real time. A holder measures its lease from the moment it sent the
//! request, on its own clock, and stops spending when that lease runs out; the grantor writes the
//! unreported credit off when *its timeline* reaches the expiry plus a grace period. If the
//! timeline ran ahead (say a leader's wall clock jumped forward), credit would be written off and
//! granted again while the holder can still spend it, breaking the budget. A timeline that lags
//! real time only delays write-offs and refills, which is safe.
//!
//! So the leader never uses its wall clock once the timeline exists. Each node remembers the time
//! of the last command it applied, and of the newest command it appended to its log, each with
//! its monotonic clock reading at that moment; a leader stamps the largest of those times plus
//! the monotonic time elapsed since, and of its own previous stamp in the same term plus the
//! elapsed time ([`time::LeaderClock`]). A new leader therefore continues from the replicated
//! time at once (no stall of a lease length, and no loss of the election's duration: the
//! commands it received before the old leader died were stamped about a replication delay
//! before it appended them) and never jumps ahead; only the very first command of a cluster takes the wall clock (UNIX ns). The
//! storage additionally floors each applied time at the largest one applied before, and
//! snapshots carry the time, so a restored node knows where the timeline stands. After a full
//! cluster restart the timeline resumes where it stopped and stays behind real time by the
//! downtime, which is again the safe direction.
//!
//! # Elections
//!
//! Besides openraft's own election timer, each node starts an election itself once it has
//! heard from no leader for openraft's leader lease plus a delay drawn afresh for each
//! campaign (`campaign.rs`): openraft 0.9 would wait a further once-drawn timeout and its next
//! tick, and keeps a shorter-log penalty across failovers.
//!
//! # Batching
//!
//! [`Replica::propose`](crate::replica::Replica::propose) puts the command in a bounded queue
//! (`proposals_queue_max`; when full the call fails at once with `Unavailable("queue full")`).
//! One proposer task takes every command waiting together, up to `batch_commands_max`, and
//! replicates them as one log entry with one time stamp; each caller gets the output of its own
//! command. A follower answers `NotLeader` with the leader's id and address; a leader that has
//! not heard from a quorum for longer than the election timeout answers `Unavailable` without
//! proposing; a batch not committed within `propose_timeout_ms` answers `Unknown` (a retry with
//! the same request id is safe).
//!
//! # Reads
//!
//! [`Replica::read`](crate::replica::Replica::read) is linearizable: the leader confirms with a
//! quorum that it still leads, waits until its state machine has applied everything committed
//! up to that point, and only then runs the closure on the applied state.
//! [`RaftNode::read_local`] reads the local state without that check.

pub(crate) mod batching;
mod campaign;
pub mod config;
mod endpoint;
pub mod machine;
pub mod network;
pub mod node;
pub mod peer_calls;
pub mod peers;
pub mod service;
pub mod time;
pub mod types;

pub use config::{NodeConfig, NodeError};
pub use machine::{BatchRefused, BatchResult, MachineApplier, SharedMachine};
pub use network::{EndpointHook, NetworkFactory, PeerConnector, TransportConfig};
pub use node::{NodeHooks, NodeMetrics, RaftNode, RaftReplica};
pub use peers::PeerProgress;
pub use time::{SystemTimeSource, TimeSource};
pub use types::{
    Entry, LogId, NodeAddr, RaftCommand, RaftResponse, Snapshot, SnapshotMeta, StorageError,
    StoredMembership, TypeConfig, Vote,
};
