//! Durable storage of the state machine's single current snapshot.
//!
//! The `state` keyspace holds exactly one record: the last snapshot's metadata and body. Writing a
//! snapshot clears the keyspace and writes the record in one atomic batch, so nothing from an
//! earlier state survives an install.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::codec::{decode, encode};
use super::error::{blocking, StoreError};
use super::kv::{KeyRange, Keyspace, KvStore, ScanOrder, WriteBatch};
use crate::raft::SnapshotMeta;

const SNAPSHOT_KEY: &[u8] = b"snapshot";

/// The snapshot bytes that travel between nodes: application state plus the replicated time
/// floor, which must survive snapshots so that command times stay never-decreasing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotBody {
    /// Largest leader time applied so far, in nanoseconds.
    pub leader_time_ns: u64,
    /// The application's serialised state ([`super::Applier::snapshot`]).
    pub applier_state: Vec<u8>,
}

impl SnapshotBody {
    /// Encodes the body as snapshot data.
    pub fn encode(&self) -> Result<Vec<u8>, StoreError> {
        Ok(encode("snapshot body", self)?)
    }

    /// Decodes snapshot data produced by [`SnapshotBody::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        Ok(decode("snapshot body", bytes)?)
    }
}

/// A snapshot as persisted: its metadata and its encoded [`SnapshotBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSnapshot {
    /// Metadata of the snapshot (last included log id, membership, id).
    pub meta: SnapshotMeta,
    /// Encoded [`SnapshotBody`].
    pub body: Vec<u8>,
}

/// Whether a write may replace a stored snapshot that covers more of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WritePolicy {
    /// A locally built snapshot: skipped if the stored one is newer (a concurrent install won).
    KeepNewer,
    /// An installed snapshot: always becomes the current one.
    Replace,
}

/// Serialises snapshot writes: builds run in their own tasks and may race with an install.
#[derive(Clone)]
pub(crate) struct SnapshotStore {
    kv: Arc<dyn KvStore>,
    write_lock: Arc<Mutex<()>>,
}

impl SnapshotStore {
    pub(crate) fn new(kv: Arc<dyn KvStore>) -> Self {
        Self {
            kv,
            write_lock: Arc::new(Mutex::new(())),
        }
    }

    /// The current snapshot, if one was ever written.
    pub(crate) fn load(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        load(self.kv.as_ref())
    }

    /// Durably writes `snapshot` (fsync before returning), replacing every key of the `state`
    /// keyspace. Returns false when `policy` kept a newer stored snapshot instead.
    pub(crate) async fn save(
        &self,
        snapshot: StoredSnapshot,
        policy: WritePolicy,
    ) -> Result<bool, StoreError> {
        let this = self.clone();
        blocking("write snapshot", move || {
            this.save_blocking(&snapshot, policy)
        })
        .await
    }

    fn save_blocking(
        &self,
        snapshot: &StoredSnapshot,
        policy: WritePolicy,
    ) -> Result<bool, StoreError> {
        // A poisoned lock only means another writer panicked; the keyspace itself is consistent
        // because every write is one atomic batch.
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let kv = self.kv.as_ref();
        if policy == WritePolicy::KeepNewer {
            if let Some(stored) = load(kv)? {
                if stored.meta.last_log_id > snapshot.meta.last_log_id {
                    return Ok(false);
                }
            }
        }
        let mut batch = WriteBatch::new();
        let mut range = KeyRange::all();
        loop {
            // The keyspace holds one record in this format; the loop also clears keys left by
            // any other layout so that they cannot leak into the new state.
            let stale = kv.scan(Keyspace::State, &range, ScanOrder::Ascending, 256)?;
            let Some((last_key, _)) = stale.last() else {
                break;
            };
            range.start = std::ops::Bound::Excluded(last_key.clone());
            for (key, _) in stale {
                batch.delete(Keyspace::State, key);
            }
        }
        batch.put(
            Keyspace::State,
            SNAPSHOT_KEY.to_vec(),
            encode("stored snapshot", snapshot)?,
        );
        kv.write(batch)?;
        kv.flush()?;
        Ok(true)
    }
}

fn load(kv: &dyn KvStore) -> Result<Option<StoredSnapshot>, StoreError> {
    match kv.get(Keyspace::State, SNAPSHOT_KEY)? {
        Some(bytes) => Ok(Some(decode("stored snapshot", &bytes)?)),
        None => Ok(None),
    }
}
