//! Durable Raft storage of an allocator node: the log, the vote and the state machine's
//! snapshots, kept in an embedded key-value engine behind the narrow [`kv::KvStore`] interface.
//!
//! Layout: three keyspaces in one database.
//! - `log`: one record per entry, keyed by big-endian index;
//! - `meta`: vote, last purged log id and committed log id;
//! - `state`: the single current snapshot (metadata plus application state).

pub mod applier;
pub mod codec;
pub mod error;
pub mod kv;
pub mod log_store;
pub mod sled_kv;
pub mod snapshot;
pub mod state_machine;

use std::path::Path;
use std::sync::Arc;

pub use applier::{Applier, ApplierError};
pub use error::StoreError;
pub use kv::{Keyspace, KvError, KvStore};
pub use log_store::{AppendObserver, LogStore, LogStoreLimits};
pub use sled_kv::{SledKv, SledOptions};
pub use state_machine::{SnapshotBuilder, StateMachineLimits, StateMachineStore};

/// Limits of the whole Raft storage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageLimits {
    /// Limits of the log store.
    pub log: LogStoreLimits,
    /// Limits of the state machine.
    pub state_machine: StateMachineLimits,
}

/// Opens the log store and state machine of one node over any key-value engine.
pub fn open<A: Applier>(
    kv: Arc<dyn KvStore>,
    applier: A,
    limits: StorageLimits,
) -> Result<(LogStore, StateMachineStore<A>), StoreError> {
    let log = LogStore::open(Arc::clone(&kv), limits.log)?;
    let state_machine = StateMachineStore::open(kv, applier, limits.state_machine)?;
    Ok((log, state_machine))
}

/// Opens the log store and state machine of one node in the sled database at `path`.
pub fn open_sled<A: Applier>(
    path: &Path,
    options: &SledOptions,
    applier: A,
    limits: StorageLimits,
) -> Result<(LogStore, StateMachineStore<A>), StoreError> {
    let kv: Arc<dyn KvStore> = Arc::new(SledKv::open(path, options)?);
    open(kv, applier, limits)
}
