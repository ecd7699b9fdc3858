//! The agent as a holder of leases: the lease manager that keeps the engine's credit slots
//! supplied from a grantor (`leasehold_client`), and its state file.

mod blocking;
mod bounded;
mod fair;
pub mod manager;
pub mod marks;
mod persist;
mod renew;
pub mod state;
pub mod state_sled;
mod watch;

pub use blocking::run_blocking_inline_on_this_thread;
pub use manager::{LeaseManager, ManagerConfig, ManagerCounters};
pub use state::{LeaseStore, MemoryStore, Recorded, StateBatch, StateError};
pub use state_sled::SledStore;
