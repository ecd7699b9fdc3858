//! The lease protocol as a holder speaks it, the same at every level of the hierarchy: an
//! agent leases from its region through it, and a delegated allocator leases from the level
//! above through it.
//!
//! [`Grantor`] is the protocol; [`RemoteGrantor`] reaches an allocator cluster over gRPC
//! (following the leader a follower names, skipping nodes that cannot be reached), and
//! [`LocalGrantor`] is a root ledger in the same process; [`CoalescingGrantor`] sends the exact
//! decisions that wait together in one call, and `LeaseBatch` carries many lease calls of one
//! holder in one. [`wire`] converts leases and
//! decisions between the ledger's form and the protocol's.
//!
//! What a holder does with its leases (credit slots, renewals, a state file) is its own
//! business and lives with the holder.

mod addr_order;
mod coalesce;
mod grantor;
mod lease_batch;
mod local;
mod remote;
pub mod wire;

pub use coalesce::{CoalesceLimits, CoalescingGrantor, DECIDE_BATCH_REQUESTS_MAX};
pub use grantor::{batch_outcome, BoxFuture, Grantor, GrantorError, WatchStream};
pub use lease_batch::{each_call, failure, failure_error, LEASE_BATCH_ITEMS_MAX};
pub use local::LocalGrantor;
pub use remote::RemoteGrantor;
