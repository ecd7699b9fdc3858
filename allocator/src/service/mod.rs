//! The allocator's gRPC services over replicated state: the lease service for downstream
//! holders and the admin service for operators.

pub mod admin;
mod audit_stream;
pub mod auth;
pub mod budget;
pub mod call_counts;
pub mod cluster;
pub mod cluster_raft;
pub mod convert;
mod decide;
mod in_process;
pub mod lease;
mod lease_batch;
mod lease_calls;
pub mod ticker;
mod views;
pub mod watch;

pub use admin::AdminServer;
pub use cluster::{ClusterControl, SingleNode};
pub use decide::UpstreamDecider;
pub use in_process::ReplicaGrantor;
pub use lease::LeaseServer;
pub use watch::WatchSettings;
