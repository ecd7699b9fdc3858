//! The durable Raft log and vote, implementing openraft's `RaftLogStorage` over [`KvStore`].
//!
//! Durability rules (each one is what Raft's safety argument assumes of stable storage):
//! - `append` reports the entries flushed only after an fsync has returned;
//! - `save_vote` fsyncs before returning, so a granted vote is never forgotten;
//! - `purge` makes the new last-purged id durable *before* deleting any entry, so a crash in the
//!   middle never shows entries below a purge point that was forgotten, and `open` finishes an
//!   interrupted purge;
//! - `truncate` removes the suffix from the highest index down and `purge` removes the prefix from
//!   the lowest index up, so every intermediate state is a contiguous log without holes.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogReader};

use super::codec::{decode, encode, log_index, log_key};
use super::error::{blocking, RaftResultExt, StoreError, Subject};
use super::kv::{KeyRange, Keyspace, KvStore, ScanOrder, WriteBatch};
use crate::raft::{Entry, LogId, StorageError, TypeConfig, Vote};

const VOTE_KEY: &[u8] = b"vote";
const LAST_PURGED_KEY: &[u8] = b"last_purged";
const COMMITTED_KEY: &[u8] = b"committed";

/// Limits of the log store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStoreLimits {
    /// Most entries returned by one `limited_get_log_entries` call (one replication batch).
    pub read_entries_max: usize,
    /// Most entries removed in one atomic batch by `purge` or `truncate`; bounds the memory a
    /// large purge needs.
    pub delete_chunk_entries: usize,
}

impl Default for LogStoreLimits {
    fn default() -> Self {
        Self {
            read_entries_max: 4096,
            delete_chunk_entries: 1024,
        }
    }
}

/// The Raft log store. Cloning yields another handle to the same log (used as the log reader).
#[derive(Clone)]
pub struct LogStore {
    kv: Arc<dyn KvStore>,
    limits: LogStoreLimits,
    /// Told the newest leader time among the commands of each append, once they are durable.
    on_append: Option<AppendObserver>,
}

/// Called with the largest `leader_time_ns` of an append's commands.
pub type AppendObserver = Arc<dyn Fn(u64) + Send + Sync>;

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("limits", &self.limits)
            .field("on_append", &self.on_append.is_some())
            .finish_non_exhaustive()
    }
}

fn index_range<RB: RangeBounds<u64>>(range: &RB) -> KeyRange {
    let map = |b: Bound<&u64>| match b {
        Bound::Included(i) => Bound::Included(log_key(*i).to_vec()),
        Bound::Excluded(i) => Bound::Excluded(log_key(*i).to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    KeyRange {
        start: map(range.start_bound()),
        end: map(range.end_bound()),
    }
}

impl LogStore {
    /// Opens the log over `kv`, finishing any purge that a crash interrupted.
    /// Tells `observe` the newest leader time of each append once it is durable (the node's
    /// received time anchor).
    pub fn with_append_observer(mut self, observe: AppendObserver) -> Self {
        self.on_append = Some(observe);
        self
    }

    pub fn open(kv: Arc<dyn KvStore>, limits: LogStoreLimits) -> Result<Self, StoreError> {
        if limits.read_entries_max == 0 {
            return Err(StoreError::ZeroLimit {
                field: "read_entries_max",
            });
        }
        if limits.delete_chunk_entries == 0 {
            return Err(StoreError::ZeroLimit {
                field: "delete_chunk_entries",
            });
        }
        let store = Self {
            kv,
            limits,
            on_append: None,
        };
        if let Some(purged) = store.last_purged()? {
            // A crash between persisting the purge point and deleting the entries leaves them
            // behind; they are garbage below the purge point.
            store.delete_entries(index_range(&(..=purged.index)), ScanOrder::Ascending)?;
            tracing::debug!(last_purged = %purged, "removed log entries up to the purge point");
        }
        Ok(store)
    }

    fn read_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
        what: &'static str,
    ) -> Result<Option<T>, StoreError> {
        match self.kv.get(Keyspace::Meta, key)? {
            Some(bytes) => Ok(Some(decode(what, &bytes)?)),
            None => Ok(None),
        }
    }

    fn last_purged(&self) -> Result<Option<LogId>, StoreError> {
        self.read_meta(LAST_PURGED_KEY, "last purged log id")
    }

    fn last_entry_id(&self) -> Result<Option<LogId>, StoreError> {
        let last = self
            .kv
            .scan(Keyspace::Log, &KeyRange::all(), ScanOrder::Descending, 1)?;
        match last.first() {
            Some((_, value)) => Ok(Some(decode::<Entry>("log entry", value)?.log_id)),
            None => Ok(None),
        }
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let kv = Arc::clone(&self.kv);
        blocking("flush log", move || Ok(kv.flush()?)).await
    }

    /// Deletes every entry in `range`, in chunks taken from the end given by `order`, so that an
    /// interrupted deletion leaves a contiguous log.
    fn delete_entries(&self, range: KeyRange, order: ScanOrder) -> Result<(), StoreError> {
        let chunk = self.limits.delete_chunk_entries;
        loop {
            let found = self.kv.scan(Keyspace::Log, &range, order, chunk)?;
            let done = found.len() < chunk;
            if !found.is_empty() {
                let mut batch = WriteBatch::new();
                for (key, _) in found {
                    batch.delete(Keyspace::Log, key);
                }
                self.kv.write(batch)?;
            }
            if done {
                return Ok(());
            }
        }
    }

    fn read_entries(&self, range: KeyRange, limit: usize) -> Result<Vec<Entry>, StoreError> {
        let pairs = self
            .kv
            .scan(Keyspace::Log, &range, ScanOrder::Ascending, limit)?;
        let mut entries = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let index = log_index(&key)?;
            if let Some(prev) = entries.last().map(|e: &Entry| e.log_id.index) {
                if index != prev + 1 {
                    return Err(StoreError::LogHole {
                        expected_index: prev + 1,
                        found_index: index,
                    });
                }
            }
            entries.push(decode::<Entry>("log entry", &value)?);
        }
        Ok(entries)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_entries(index_range(&range), usize::MAX)
            .raft(Subject::ReadLogs)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_entries(index_range(&(start..end)), self.limits.read_entries_max)
            .raft(Subject::ReadLogs)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id = self.last_purged().raft(Subject::ReadLogs)?;
        let last_entry = self.last_entry_id().raft(Subject::ReadLogs)?;
        // With every entry purged the log ends where the purge ended.
        let last_log_id = last_entry.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = encode("vote", vote).raft(Subject::WriteVote)?;
        self.kv
            .put(Keyspace::Meta, VOTE_KEY, &bytes)
            .raft(Subject::WriteVote)?;
        self.flush().await.raft(Subject::WriteVote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.read_meta(VOTE_KEY, "vote").raft(Subject::ReadVote)
    }

    /// Stored without an fsync: the committed id only shortens recovery (committed entries are
    /// re-applied at start-up instead of waiting for the leader), and losing the latest value is
    /// harmless because the engine persists writes in order.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes = encode("committed log id", &committed).raft(Subject::WriteLogs)?;
        self.kv
            .put(Keyspace::Meta, COMMITTED_KEY, &bytes)
            .raft(Subject::WriteLogs)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let stored: Option<Option<LogId>> = self
            .read_meta(COMMITTED_KEY, "committed log id")
            .raft(Subject::ReadLogs)?;
        Ok(stored.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut batch = WriteBatch::new();
        let mut newest_time: Option<u64> = None;
        for entry in entries {
            if let openraft::EntryPayload::Normal(command) = &entry.payload {
                newest_time = newest_time.max(Some(command.leader_time_ns));
            }
            let bytes = encode("log entry", &entry).raft(Subject::WriteLogs)?;
            batch.put(Keyspace::Log, log_key(entry.log_id.index).to_vec(), bytes);
        }
        if !batch.is_empty() {
            self.kv.write(batch).raft(Subject::WriteLogs)?;
        }
        // Even an empty append must report completion, and only once everything before it is
        // durable; the flush is what makes the entries safe to acknowledge to the leader.
        match self.flush().await {
            Ok(()) => {
                if let (Some(observe), Some(t)) = (&self.on_append, newest_time) {
                    observe(t);
                }
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e.into_raft(Subject::WriteLogs))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.delete_entries(index_range(&(log_id.index..)), ScanOrder::Descending)
            .raft(Subject::WriteLogs)?;
        self.flush().await.raft(Subject::WriteLogs)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let previous = self.last_purged().raft(Subject::WriteLogs)?;
        if previous.as_ref().is_some_and(|p| p >= &log_id) {
            // The purge point never moves backwards.
            return Ok(());
        }
        let bytes = encode("last purged log id", &log_id).raft(Subject::WriteLogs)?;
        self.kv
            .put(Keyspace::Meta, LAST_PURGED_KEY, &bytes)
            .raft(Subject::WriteLogs)?;
        self.flush().await.raft(Subject::WriteLogs)?;
        self.delete_entries(index_range(&(..=log_id.index)), ScanOrder::Ascending)
            .raft(Subject::WriteLogs)
    }
}
