//! Reading state written by releases before usage was recorded.
//!
//! Postcard writes a struct's fields one after the other with nothing to mark where one
//! ends, so a state written without the usage book cannot be read as one with it. Snapshots
//! carry a format byte that says which layout follows; backups do not, and are read in the
//! current layout first and in the earlier one when that fails (the state is a backup's
//! last field, so an earlier backup always ends where the usage book would start).

use super::records::{AuditEntry, Emergency, Event, Ring};
use super::ShadowBook;
use super::{AllocatorState, Pending, PolicyMeta};
use leasehold_common::ledger::{Ledger, UsageBook};
use leasehold_common::policy::PolicySet;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Snapshot format of the layout without usage.
pub const SNAPSHOT_FORMAT_WITHOUT_USAGE: u8 = 2;

/// [`AllocatorState`] as releases before usage records wrote it.
#[derive(Deserialize)]
pub struct StateWithoutUsage {
    ledger: Ledger,
    policies: PolicySet,
    meta: BTreeMap<String, PolicyMeta>,
    pending: BTreeMap<String, Pending>,
    emergency: BTreeMap<String, Emergency>,
    audit: Ring<AuditEntry>,
    events: Ring<Event>,
    shadow: ShadowBook,
}

impl From<StateWithoutUsage> for AllocatorState {
    fn from(s: StateWithoutUsage) -> Self {
        AllocatorState {
            ledger: s.ledger,
            policies: s.policies,
            meta: s.meta,
            pending: s.pending,
            emergency: s.emergency,
            audit: s.audit,
            events: s.events,
            shadow: s.shadow,
            // Usage starts from the upgrade: nothing earlier was recorded.
            usage: UsageBook::default(),
        }
    }
}

/// A snapshot body of the layout without usage.
#[derive(Deserialize)]
struct SnapshotWithoutUsage {
    timeline_ns: u64,
    machine: StateWithoutUsage,
}

/// A backup of the layout without usage.
#[derive(Deserialize)]
pub struct BackupWithoutUsage {
    pub cluster: String,
    pub taken_at_ns: u64,
    pub state: StateWithoutUsage,
}

/// Reads a snapshot body of format `format`, if it is the earlier layout.
pub fn snapshot(format: u8, body: &[u8]) -> Option<Result<(u64, AllocatorState), String>> {
    if format != SNAPSHOT_FORMAT_WITHOUT_USAGE {
        return None;
    }
    Some(
        postcard::from_bytes::<SnapshotWithoutUsage>(body)
            .map(|s| (s.timeline_ns, s.machine.into()))
            .map_err(|e| e.to_string()),
    )
}
