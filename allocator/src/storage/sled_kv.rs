//! [`KvStore`] over sled 0.34.
//!
//! sled keeps per-tree overhead in memory and on disk, so the store opens exactly one tree per
//! [`Keyspace`] and nothing else. Single-keyspace batches use sled's native atomic batch; batches
//! spanning keyspaces use a multi-tree transaction.

use std::path::Path;

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::kv::{KeyRange, Keyspace, KvError, KvPair, KvStore, ScanOrder, WriteBatch, WriteOp};

/// Tuning knobs for the sled engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SledOptions {
    /// Upper bound of sled's page cache in bytes.
    pub cache_capacity_bytes: u64,
    /// Interval of sled's background flush; `None` flushes only on explicit request. Durability
    /// never depends on it: every acknowledged write is flushed explicitly.
    pub flush_every_ms: Option<u64>,
    /// Favour disk space over write throughput (sled `Mode::LowSpace`).
    pub low_space: bool,
    /// How long `open` keeps retrying while another handle still holds the database's file
    /// lock. sled releases the lock of a dropped database lazily (its epoch-based reclamation
    /// frees the file last), so an in-process reopen right after a drop can briefly see it held.
    pub lock_wait_ms: u64,
}

impl Default for SledOptions {
    fn default() -> Self {
        Self {
            cache_capacity_bytes: 64 * 1024 * 1024,
            flush_every_ms: Some(500),
            low_space: true,
            lock_wait_ms: 5_000,
        }
    }
}

/// A sled database holding the three keyspaces of one Raft node.
#[derive(Clone, Debug)]
pub struct SledKv {
    db: sled::Db,
    // Indexed by `tree_index`; a fixed array keeps lookups branch-free and the tree set closed.
    trees: [sled::Tree; 3],
}

/// Pause between attempts to take a database's file lock.
const LOCK_RETRY_MS: u64 = 10;

/// sled reports a held file lock only through the message of a generic I/O error.
fn is_lock_conflict(err: &sled::Error) -> bool {
    matches!(err, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

fn tree_index(keyspace: Keyspace) -> usize {
    match keyspace {
        Keyspace::Log => 0,
        Keyspace::Meta => 1,
        Keyspace::State => 2,
    }
}

fn engine(op: &'static str, keyspace: Keyspace, err: sled::Error) -> KvError {
    KvError::Engine {
        op,
        keyspace,
        reason: err.to_string(),
    }
}

fn database(op: &'static str, err: impl std::fmt::Display) -> KvError {
    KvError::Database {
        op,
        reason: err.to_string(),
    }
}

impl SledKv {
    /// Opens (creating if needed) the database in directory `path`.
    pub fn open(path: &Path, options: &SledOptions) -> Result<Self, KvError> {
        let mode = if options.low_space {
            sled::Mode::LowSpace
        } else {
            sled::Mode::HighThroughput
        };
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_capacity_bytes)
            .flush_every_ms(options.flush_every_ms)
            .mode(mode);
        let attempts_max = options.lock_wait_ms / LOCK_RETRY_MS + 1;
        let mut attempt = 1;
        let db = loop {
            match config.open() {
                Ok(db) => break db,
                Err(e) if attempt < attempts_max && is_lock_conflict(&e) => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(LOCK_RETRY_MS));
                }
                Err(e) => return Err(database("open", format!("{}: {e}", path.display()))),
            }
        };
        let open = |ks: Keyspace| {
            db.open_tree(ks.name())
                .map_err(|e| engine("open tree", ks, e))
        };
        let trees = [
            open(Keyspace::Log)?,
            open(Keyspace::Meta)?,
            open(Keyspace::State)?,
        ];
        Ok(Self { db, trees })
    }

    fn tree(&self, keyspace: Keyspace) -> &sled::Tree {
        &self.trees[tree_index(keyspace)]
    }

    fn write_multi(&self, batches: [Option<sled::Batch>; 3]) -> Result<(), KvError> {
        let result: Result<(), TransactionError<()>> = self.trees[..].transaction(|txs| {
            for (tx, batch) in txs.iter().zip(batches.iter()) {
                if let Some(batch) = batch {
                    tx.apply_batch(batch)?;
                }
            }
            Ok::<(), ConflictableTransactionError<()>>(())
        });
        result.map_err(|e| database("write batch across keyspaces", format!("{e:?}")))
    }
}

impl KvStore for SledKv {
    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let value = self
            .tree(keyspace)
            .get(key)
            .map_err(|e| engine("get", keyspace, e))?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn put(&self, keyspace: Keyspace, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.tree(keyspace)
            .insert(key, value)
            .map_err(|e| engine("put", keyspace, e))?;
        Ok(())
    }

    fn delete(&self, keyspace: Keyspace, key: &[u8]) -> Result<(), KvError> {
        self.tree(keyspace)
            .remove(key)
            .map_err(|e| engine("delete", keyspace, e))?;
        Ok(())
    }

    fn scan(
        &self,
        keyspace: Keyspace,
        range: &KeyRange,
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KvPair>, KvError> {
        if limit == 0 {
            return Err(KvError::ZeroScanLimit { keyspace });
        }
        // sled panics on inverted ranges; an empty range simply has no keys.
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let iter = self
            .tree(keyspace)
            .range::<Vec<u8>, _>((range.start.clone(), range.end.clone()));
        let items: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> = match order {
            ScanOrder::Ascending => Box::new(iter),
            ScanOrder::Descending => Box::new(iter.rev()),
        };
        items
            .take(limit)
            .map(|r| {
                r.map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .map_err(|e| engine("scan", keyspace, e))
            })
            .collect()
    }

    fn write(&self, batch: WriteBatch) -> Result<(), KvError> {
        let mut per_tree: [Option<sled::Batch>; 3] = [None, None, None];
        for op in batch.into_ops() {
            let slot = per_tree[tree_index(op.keyspace())].get_or_insert_with(sled::Batch::default);
            match op {
                WriteOp::Put { key, value, .. } => slot.insert(key, value),
                WriteOp::Delete { key, .. } => slot.remove(key),
            }
        }
        let used = per_tree.iter().filter(|b| b.is_some()).count();
        if used <= 1 {
            for (ks, batch) in Keyspace::ALL.into_iter().zip(per_tree) {
                if let Some(batch) = batch {
                    self.trees[tree_index(ks)]
                        .apply_batch(batch)
                        .map_err(|e| engine("write batch", ks, e))?;
                }
            }
            return Ok(());
        }
        self.write_multi(per_tree)
    }

    fn flush(&self) -> Result<(), KvError> {
        // All trees share one page cache, so flushing the database covers every keyspace.
        self.db.flush().map_err(|e| database("flush", e))?;
        Ok(())
    }

    fn size_on_disk_bytes(&self) -> Result<u64, KvError> {
        self.db
            .size_on_disk()
            .map_err(|e| database("measure size on disk", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_order_matches_tree_slots() {
        // `write` pairs `Keyspace::ALL` with the per-tree batch array by position.
        for (i, ks) in Keyspace::ALL.into_iter().enumerate() {
            assert_eq!(tree_index(ks), i, "keyspace {ks}");
        }
    }
}
