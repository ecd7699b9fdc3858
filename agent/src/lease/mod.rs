//! The holder side of the lease protocol: grantors and the lease manager.

pub mod grantor;
pub mod manager;
pub mod wire;

pub use grantor::{Grantor, GrantorError, LocalGrantor, RemoteGrantor};
pub use manager::{LeaseManager, ManagerConfig, ManagerCounters};
