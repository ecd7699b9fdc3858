//! Live lease records and their expiry order.

use crate::lease::{Lease, LeaseId};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseState {
    /// May be renewed.
    Active,
    /// Superseded (newer policy version or a fresh acquire): spendable until expiry by the
    /// holder, never renewed; released or written off.
    Closing,
    /// Revoked by an operator: as `Closing`, and the holder was told to stop.
    Revoked,
}

impl LeaseState {
    pub fn name(self) -> &'static str {
        match self {
            LeaseState::Active => "active",
            LeaseState::Closing => "closing",
            LeaseState::Revoked => "revoked",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The newest version, unsigned.
    pub lease: Lease,
    /// Cumulative usage reported so far.
    pub used: u64,
    /// Cumulative credit handed back so far (already taken off `lease.credit`).
    pub returned: u64,
    pub state: LeaseState,
    /// When the grantor writes the lease off: expiry plus grace, on the ledger timeline.
    pub write_off_at: Nanos,
}

impl LeaseRecord {
    /// Credit on this lease that is neither reported spent nor handed back.
    pub fn unspent(&self) -> u64 {
        self.lease.credit - self.used
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseBook {
    records: BTreeMap<LeaseId, LeaseRecord>,
    by_write_off: BTreeSet<(Nanos, LeaseId)>,
}

impl LeaseBook {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn get(&self, id: LeaseId) -> Option<&LeaseRecord> {
        self.records.get(&id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &LeaseRecord> {
        self.records.values()
    }

    pub fn insert(&mut self, record: LeaseRecord) {
        let id = record.lease.lease_id;
        self.by_write_off.insert((record.write_off_at, id));
        if let Some(old) = self.records.insert(id, record) {
            self.by_write_off.remove(&(old.write_off_at, id));
        }
    }

    /// Edits a record; keeps the expiry order right if `write_off_at` changed.
    pub fn update<R>(&mut self, id: LeaseId, f: impl FnOnce(&mut LeaseRecord) -> R) -> Option<R> {
        let rec = self.records.get_mut(&id)?;
        let before = rec.write_off_at;
        let out = f(rec);
        if rec.write_off_at != before {
            self.by_write_off.remove(&(before, id));
            self.by_write_off.insert((rec.write_off_at, id));
        }
        Some(out)
    }

    pub fn remove(&mut self, id: LeaseId) -> Option<LeaseRecord> {
        let rec = self.records.remove(&id)?;
        self.by_write_off.remove(&(rec.write_off_at, id));
        Some(rec)
    }

    /// Every lease due for write-off at or before `now`, in write-off order.
    pub fn due(&self, now: Nanos) -> impl Iterator<Item = &LeaseRecord> {
        self.by_write_off
            .range(..=(now, LeaseId::MAX))
            .map(|(_, id)| &self.records[id])
    }

    /// The next lease due for write-off at or before `now`, if any.
    pub fn next_due(&self, now: Nanos) -> Option<LeaseId> {
        self.by_write_off
            .first()
            .filter(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
    }
}
