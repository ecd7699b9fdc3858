//! A [`KvStore`] wrapper that records the order of operations and injects failures, to check
//! what the storage does before it acknowledges.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use leasehold_allocator::storage::kv::{KeyRange, KvPair, ScanOrder, WriteBatch, WriteOp};
use leasehold_allocator::storage::{Keyspace, KvError, KvStore, SledKv};

/// One observed mutation or durability barrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Put(Keyspace),
    Delete(Keyspace),
    /// A batch, described by the keyspaces it puts to and deletes from.
    Batch {
        puts: Vec<Keyspace>,
        deletes: Vec<Keyspace>,
    },
    Flush,
}

pub struct RecordingKv {
    inner: SledKv,
    events: Mutex<Vec<Event>>,
    /// Fails every flush, as a failing disk would.
    pub fail_flush: AtomicBool,
    /// Fails batches that delete log entries, as a crash in the middle of a purge would.
    pub fail_log_deletes: AtomicBool,
}

fn injected(op: &'static str) -> KvError {
    KvError::Database {
        op,
        reason: "injected failure".into(),
    }
}

impl RecordingKv {
    pub fn new(inner: SledKv) -> Self {
        Self {
            inner,
            events: Mutex::new(Vec::new()),
            fail_flush: AtomicBool::new(false),
            fail_log_deletes: AtomicBool::new(false),
        }
    }

    /// Returns and clears the events recorded so far.
    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }
}

fn distinct(mut v: Vec<Keyspace>) -> Vec<Keyspace> {
    v.sort();
    v.dedup();
    v
}

impl KvStore for RecordingKv {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(ks, key)
    }

    fn put(&self, ks: Keyspace, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.record(Event::Put(ks));
        self.inner.put(ks, key, value)
    }

    fn delete(&self, ks: Keyspace, key: &[u8]) -> Result<(), KvError> {
        self.record(Event::Delete(ks));
        self.inner.delete(ks, key)
    }

    fn scan(
        &self,
        ks: Keyspace,
        range: &KeyRange,
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KvPair>, KvError> {
        self.inner.scan(ks, range, order, limit)
    }

    fn write(&self, batch: WriteBatch) -> Result<(), KvError> {
        let mut puts = Vec::new();
        let mut deletes = Vec::new();
        for op in batch.ops() {
            match op {
                WriteOp::Put { keyspace, .. } => puts.push(*keyspace),
                WriteOp::Delete { keyspace, .. } => deletes.push(*keyspace),
            }
        }
        if deletes.contains(&Keyspace::Log) && self.fail_log_deletes.load(Ordering::SeqCst) {
            return Err(injected("write batch"));
        }
        self.record(Event::Batch {
            puts: distinct(puts),
            deletes: distinct(deletes),
        });
        self.inner.write(batch)
    }

    fn flush(&self) -> Result<(), KvError> {
        if self.fail_flush.load(Ordering::SeqCst) {
            return Err(injected("flush"));
        }
        self.record(Event::Flush);
        self.inner.flush()
    }

    fn size_on_disk_bytes(&self) -> Result<u64, KvError> {
        self.inner.size_on_disk_bytes()
    }
}
