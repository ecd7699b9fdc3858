//! The Leasehold allocator: the Raft-replicated service that owns credit buckets and grants
//! leases.

pub mod config;
pub mod http;
pub mod metrics;
pub mod policy_bounds;
pub mod raft;
pub mod replica;
pub mod rpc_timer;
pub mod server;
pub mod service;
pub mod state;
pub mod storage;
pub mod upstream;
