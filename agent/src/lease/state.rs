//! What an agent must remember across a crash so that it never spends credit twice (P2).
//!
//! Per lease, the *mark*: the most credit the engine may have spent under it. The lease
//! manager makes a mark durable before it lets the slot hold credit up to it, so after a
//! crash every lease of the previous run can be reported as spent up to its mark — never
//! less than was really spent — and the grantor takes back only what lies above the mark.
//! Also the end of the block of request ids reserved so far: a restarted agent continues
//! above it, so the grantor never mistakes a new request for a retry of an old one.
//!
//! The store is deliberately narrow: one read at start and atomic, durable batches after
//! that. [`SledStore`](super::state_sled::SledStore) keeps it in a file; [`MemoryStore`]
//! keeps it in memory (tests, and a model of what a restart reads).

use leasehold_common::lease::LeaseId;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use thiserror::Error;

/// Request ids reserved per durable write.
pub const REQUEST_ID_BLOCK: u64 = 10_000;

/// What a previous run left behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Leases not known to be closed, with their marks.
    pub marks: BTreeMap<LeaseId, u64>,
    /// Every request id below this may have been used.
    pub request_ids_end: u64,
}

/// Changes written together and made durable before [`LeaseStore::commit`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateBatch {
    /// New marks, `(lease, mark)`; a lease not yet recorded is added.
    pub marks: Vec<(LeaseId, u64)>,
    /// Leases known closed: their credit can no longer be spent here.
    pub forget: Vec<LeaseId>,
    /// A new end of the reserved request ids (only ever raised).
    pub request_ids_end: Option<u64>,
}

impl StateBatch {
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty() && self.forget.is_empty() && self.request_ids_end.is_none()
    }
}

/// Why the state could not be read or written.
#[derive(Debug, Error)]
pub enum StateError {
    #[error("state file: {0}")]
    Storage(String),
    #[error("state file: record {key} is {len} bytes, expected 8")]
    Corrupt { key: String, len: usize },
    #[error("state file: lease count {count} exceeds leases_max {max}")]
    TooManyLeases { count: usize, max: usize },
}

/// Durable storage of the agent's lease state.
pub trait LeaseStore: Send + Sync + 'static {
    /// Everything recorded so far.
    fn load(&self) -> Result<Recorded, StateError>;
    /// Applies `batch` atomically; returns only once it would survive a crash.
    fn commit(&self, batch: &StateBatch) -> Result<(), StateError>;
}

/// A store in memory: what a restart would read, for tests and models.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<Recorded>,
    commits: Mutex<u64>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Batches committed so far.
    pub fn commits(&self) -> u64 {
        *self.commits.lock()
    }
}

impl LeaseStore for MemoryStore {
    fn load(&self) -> Result<Recorded, StateError> {
        Ok(self.state.lock().clone())
    }

    fn commit(&self, batch: &StateBatch) -> Result<(), StateError> {
        let mut s = self.state.lock();
        apply(&mut s, batch);
        *self.commits.lock() += 1;
        Ok(())
    }
}

/// The meaning of a batch, shared by every store.
pub fn apply(state: &mut Recorded, batch: &StateBatch) {
    for &(lease, mark) in &batch.marks {
        state.marks.insert(lease, mark);
    }
    for lease in &batch.forget {
        state.marks.remove(lease);
    }
    if let Some(end) = batch.request_ids_end {
        state.request_ids_end = state.request_ids_end.max(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forget_wins_over_a_mark_in_the_same_batch_and_ids_never_go_down() {
        let store = MemoryStore::new();
        store
            .commit(&StateBatch {
                marks: vec![(1, 10), (2, 20)],
                forget: vec![],
                request_ids_end: Some(100),
            })
            .unwrap();
        store
            .commit(&StateBatch {
                marks: vec![(2, 30)],
                forget: vec![2],
                request_ids_end: Some(50),
            })
            .unwrap();
        let r = store.load().unwrap();
        assert_eq!(r.marks.into_iter().collect::<Vec<_>>(), vec![(1, 10)]);
        assert_eq!(r.request_ids_end, 100);
    }
}
