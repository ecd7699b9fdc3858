//! The lease calls a node applied, counted by kind whether they came alone or in a
//! `LeaseBatch`: the figure the §9 capacity model compares with the credit that moved,
//! which a count of RPCs cannot give once calls travel in batches.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub struct LeaseCallCounts {
    pub acquires: AtomicU64,
    pub reports: AtomicU64,
    pub releases: AtomicU64,
    /// Of those, the calls that came in a `LeaseBatch`.
    pub batched: AtomicU64,
}

/// The kind of a lease call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    Acquire,
    Report,
    Release,
}

impl LeaseCallCounts {
    pub(super) fn count(&self, kind: CallKind, batched: bool) {
        let counter = match kind {
            CallKind::Acquire => &self.acquires,
            CallKind::Report => &self.reports,
            CallKind::Release => &self.releases,
        };
        counter.fetch_add(1, Relaxed);
        if batched {
            self.batched.fetch_add(1, Relaxed);
        }
    }
}
