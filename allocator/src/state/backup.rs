//! Backups of a root cluster's replicated state, and starting a new cluster from one.
//!
//! A backup is the whole [`AllocatorState`] (policies with every kept version, budgets,
//! window and calendar-quota usage, emergency switches, the audit trail) read at one
//! linearizable point, behind the storage format's version byte. Restoring is a
//! replicated command, so every replica of the new cluster (and any node that joins it
//! later, through snapshots) holds the same state. A restore never mints credit: leases
//! outstanding when the backup was taken are written off as spent, since their holders may
//! still spend them, and the ledger's epoch moves on so the new cluster's leases are told
//! from the old one's.
//!
//! Only a root cluster is backed up: a delegated cluster's state is credit leased from
//! upstream and policies mirrored from it, which a new region rebuilds by leasing again.

use super::{AdminError, AllocatorState, StateOutput};
use crate::storage::codec::{decode, encode};
use leasehold_common::ledger::{Command, Role};
use leasehold_common::time::Nanos;
use serde::{Deserialize, Serialize};

pub use leasehold_proto::BACKUP_LEN_MAX;

/// A backup as written to a file.
#[derive(Clone, Debug, Deserialize)]
pub struct Backup {
    /// The cluster the state belongs to; it is restored only into a cluster of that name.
    pub cluster: String,
    /// When the backup was read, on the cluster's timeline (nanoseconds since the epoch).
    pub taken_at_ns: u64,
    pub state: AllocatorState,
}

/// [`Backup`] as it is written: borrowing the state, so taking a backup encodes it without
/// copying it first (postcard writes `&str` and `&T` exactly as `String` and `T`).
#[derive(Serialize)]
struct BackupOf<'a> {
    cluster: &'a str,
    taken_at_ns: u64,
    state: &'a AllocatorState,
}

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    pub policies: u64,
    pub leases_written_off: u64,
    pub units_written_off: u64,
    pub epoch: u64,
}

impl Backup {
    /// A backup read back from its bytes, refusing anything else (another format version,
    /// a truncated or altered file) with the reason.
    pub fn from_bytes(bytes: &[u8]) -> Result<Backup, AdminError> {
        if bytes.len() > BACKUP_LEN_MAX {
            return Err(AdminError::Invalid(format!(
                "backup of {} bytes is over the {BACKUP_LEN_MAX}-byte limit",
                bytes.len()
            )));
        }
        let current = decode("backup", bytes);
        let e = match current {
            Ok(backup) => return Ok(backup),
            Err(e) => e,
        };
        match decode::<super::earlier::BackupWithoutUsage>("backup", bytes) {
            Ok(b) => Ok(Backup {
                cluster: b.cluster,
                taken_at_ns: b.taken_at_ns,
                state: b.state.into(),
            }),
            Err(_) => Err(AdminError::Invalid(format!("not a backup: {e}"))),
        }
    }
}

impl AllocatorState {
    /// This state as a backup's bytes, taken at `now`; refused on a delegated cluster and
    /// when the encoding is over [`BACKUP_LEN_MAX`].
    pub fn backup(&self, now: Nanos) -> Result<Vec<u8>, AdminError> {
        if self.is_delegated() {
            return Err(AdminError::Refused(
                "a delegated cluster's state is leased from and mirrored from its upstream: \
                 back up the root cluster"
                    .into(),
            ));
        }
        let backup = BackupOf {
            cluster: &self.ledger.config().grantor_id,
            taken_at_ns: now.0,
            state: self,
        };
        let bytes = encode("backup", &backup).map_err(|e| AdminError::Invalid(e.to_string()))?;
        if bytes.len() > BACKUP_LEN_MAX {
            return Err(AdminError::Refused(format!(
                "the state is {} bytes, over the {BACKUP_LEN_MAX}-byte backup limit",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    pub(super) fn apply_restore(
        &mut self,
        now: Nanos,
        bytes: &[u8],
        (actor, why): (&str, &str),
    ) -> StateOutput {
        match self.restore(now, bytes, (actor, why)) {
            Ok(r) => StateOutput::Restored(r),
            Err(e) => StateOutput::Refused(e),
        }
    }

    fn restore(
        &mut self,
        now: Nanos,
        bytes: &[u8],
        (actor, why): (&str, &str),
    ) -> Result<Restored, AdminError> {
        let backup = Backup::from_bytes(bytes)?;
        self.check_restorable(&backup)?;
        let mut state = backup.state;
        let outstanding = state.leases_outstanding();
        let (leases, units) = state.ledger.write_off_all(now);
        state.book_written_off(outstanding);
        let epoch = state.ledger.epoch() + 1;
        let _ = state.ledger.apply(now, Command::SetEpoch { epoch });
        let restored = Restored {
            policies: state.policies.len() as u64,
            leases_written_off: leases,
            units_written_off: units,
            epoch,
        };
        let reason = format!(
            "{why}{}backup taken at {} ms: {} policies; {leases} outstanding leases ({units} units) \
             written off as spent; epoch {epoch}",
            if why.is_empty() { "" } else { "; " },
            backup.taken_at_ns / 1_000_000,
            restored.policies,
        );
        state.record(
            now,
            actor,
            "cluster.restore",
            &backup.cluster,
            (String::new(), String::new()),
            &reason,
        );
        *self = state;
        Ok(restored)
    }

    /// Only into a fresh root cluster of the backup's name: restoring over live state
    /// would forget what was granted since.
    fn check_restorable(&self, backup: &Backup) -> Result<(), AdminError> {
        let config = self.ledger.config();
        if config.role != Role::Root || backup.state.ledger.config().role != Role::Root {
            return Err(AdminError::Refused(
                "only a root cluster is restored from a backup".into(),
            ));
        }
        if backup.cluster != config.grantor_id {
            return Err(AdminError::Refused(format!(
                "the backup is of cluster '{}'; this cluster is '{}' (name the new cluster \
                 as the old one)",
                backup.cluster, config.grantor_id
            )));
        }
        if !self.policies.is_empty() || self.ledger.accounts().next().is_some() {
            return Err(AdminError::Refused(
                "this cluster already holds policies or credit: restore only into a new cluster"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
