//! The Leasehold agent: a sidecar (or an in-process library) that admits requests locally
//! against credit leased from an allocator.

pub mod api;
pub mod config;
pub mod credit;
pub mod engine;
pub mod exact;
pub use leasehold_proto::heap;
pub mod lease;
pub mod limiter_store;
pub mod reload;
pub mod shaping;
mod sync;
