//! The holder side of the lease protocol: grantors, the lease manager and its state file.

mod blocking;
pub mod grantor;
pub mod manager;
pub mod marks;
mod persist;
mod renew;
pub mod state;
pub mod state_sled;
mod watch;
pub mod wire;

pub use blocking::run_blocking_inline_on_this_thread;
pub use grantor::{Grantor, GrantorError, LocalGrantor, RemoteGrantor, WatchStream};
pub use manager::{LeaseManager, ManagerConfig, ManagerCounters};
pub use state::{LeaseStore, MemoryStore, Recorded, StateBatch, StateError};
pub use state_sled::SledStore;
