//! The narrow key-value interface the Raft storage is written against.
//!
//! Everything above this module (log store, state machine, snapshots) talks only to [`KvStore`],
//! so the embedded engine underneath can be replaced without touching Raft code. The interface is
//! deliberately small: a fixed set of keyspaces, point reads and writes, ordered scans, atomic
//! batches and an explicit durability barrier.

use std::fmt;
use std::ops::Bound;

use thiserror::Error;

/// The fixed set of keyspaces. Engines such as sled pay a per-keyspace cost, so the set is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Keyspace {
    /// Raft log entries keyed by big-endian log index.
    Log,
    /// Raft metadata: vote, last purged log id, committed log id.
    Meta,
    /// State machine persistence: the last snapshot (meta and body).
    State,
}

impl Keyspace {
    /// Every keyspace, in a stable order.
    pub const ALL: [Keyspace; 3] = [Keyspace::Log, Keyspace::Meta, Keyspace::State];

    /// The stable on-disk name of the keyspace.
    pub fn name(self) -> &'static str {
        match self {
            Keyspace::Log => "log",
            Keyspace::Meta => "meta",
            Keyspace::State => "state",
        }
    }
}

impl fmt::Display for Keyspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The order in which [`KvStore::scan`] yields keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOrder {
    /// Smallest key first.
    Ascending,
    /// Largest key first.
    Descending,
}

/// A half-open or closed range of keys, compared bytewise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// Lower bound of the range.
    pub start: Bound<Vec<u8>>,
    /// Upper bound of the range.
    pub end: Bound<Vec<u8>>,
}

impl KeyRange {
    /// Every key of a keyspace.
    pub fn all() -> Self {
        Self {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// True when the bounds cannot contain any key (e.g. `5..3` or `3..3`); engines may panic on
    /// such ranges, so callers check first.
    pub fn is_empty(&self) -> bool {
        match (&self.start, &self.end) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s), Bound::Excluded(e))
            | (Bound::Excluded(s), Bound::Included(e))
            | (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
            _ => false,
        }
    }
}

/// One write inside a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Insert or overwrite `key` with `value`.
    Put {
        /// Target keyspace.
        keyspace: Keyspace,
        /// Key bytes.
        key: Vec<u8>,
        /// Value bytes.
        value: Vec<u8>,
    },
    /// Remove `key`; removing an absent key is not an error.
    Delete {
        /// Target keyspace.
        keyspace: Keyspace,
        /// Key bytes.
        key: Vec<u8>,
    },
}

impl WriteOp {
    /// The keyspace this operation writes to.
    pub fn keyspace(&self) -> Keyspace {
        match self {
            WriteOp::Put { keyspace, .. } | WriteOp::Delete { keyspace, .. } => *keyspace,
        }
    }
}

/// A group of writes applied all-or-nothing by [`KvStore::write`], possibly across keyspaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<WriteOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues an insert or overwrite.
    pub fn put(&mut self, keyspace: Keyspace, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(WriteOp::Put {
            keyspace,
            key,
            value,
        });
    }

    /// Queues a removal.
    pub fn delete(&mut self, keyspace: Keyspace, key: Vec<u8>) {
        self.ops.push(WriteOp::Delete { keyspace, key });
    }

    /// Number of queued operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The queued operations, in the order they were added.
    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// Consumes the batch, yielding its operations in order.
    pub fn into_ops(self) -> Vec<WriteOp> {
        self.ops
    }
}

/// A key-value pair returned by a scan.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// Failure of the key-value engine.
#[derive(Debug, Error)]
pub enum KvError {
    /// The engine failed while performing `op` on `keyspace`.
    #[error("key-value engine failed to {op} in keyspace `{keyspace}`: {reason}")]
    Engine {
        /// The operation that failed (e.g. `get`, `flush`).
        op: &'static str,
        /// The keyspace involved.
        keyspace: Keyspace,
        /// The engine's own description of the failure.
        reason: String,
    },
    /// The engine failed outside any single keyspace (opening, flushing, measuring).
    #[error("key-value engine failed to {op}: {reason}")]
    Database {
        /// The operation that failed.
        op: &'static str,
        /// The engine's own description of the failure.
        reason: String,
    },
    /// A scan was called with a limit of zero, which could never make progress.
    #[error("scan of keyspace `{keyspace}` has limit 0; the limit must be at least 1")]
    ZeroScanLimit {
        /// The keyspace scanned.
        keyspace: Keyspace,
    },
}

/// The storage engine interface used by the Raft log store and state machine.
///
/// Writes become visible to readers as soon as the call returns; they become durable only after a
/// later [`KvStore::flush`] returns. Implementations must persist writes in the order they were
/// made, so a flush that returns makes every earlier write durable.
pub trait KvStore: Send + Sync + 'static {
    /// Reads one value.
    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, KvError>;

    /// Inserts or overwrites one value.
    fn put(&self, keyspace: Keyspace, key: &[u8], value: &[u8]) -> Result<(), KvError>;

    /// Removes one key; removing an absent key is not an error.
    fn delete(&self, keyspace: Keyspace, key: &[u8]) -> Result<(), KvError>;

    /// Returns up to `limit` pairs within `range`, in `order`. `limit` must be at least 1.
    fn scan(
        &self,
        keyspace: Keyspace,
        range: &KeyRange,
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KvPair>, KvError>;

    /// Applies every operation of `batch` atomically: after a crash either all or none of them
    /// are visible.
    fn write(&self, batch: WriteBatch) -> Result<(), KvError>;

    /// Blocks until every write made before the call is on stable storage.
    fn flush(&self) -> Result<(), KvError>;

    /// Bytes the engine currently occupies on disk.
    fn size_on_disk_bytes(&self) -> Result<u64, KvError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ranges_are_detected() {
        let r = |s: Bound<Vec<u8>>, e: Bound<Vec<u8>>| KeyRange { start: s, end: e };
        assert!(r(Bound::Included(vec![3]), Bound::Excluded(vec![3])).is_empty());
        assert!(r(Bound::Included(vec![5]), Bound::Included(vec![3])).is_empty());
        assert!(r(Bound::Excluded(vec![3]), Bound::Included(vec![3])).is_empty());
        assert!(!r(Bound::Included(vec![3]), Bound::Included(vec![3])).is_empty());
        assert!(!r(Bound::Included(vec![3]), Bound::Unbounded).is_empty());
        assert!(!KeyRange::all().is_empty());
    }
}
