//! Backup and Restore: a root cluster's state to a file, and a new cluster from it.

use super::{AdminServer, StateOutput};
use crate::replica::Replica;
use crate::state::backup::Backup;
use crate::state::{AdminError, AllocatorState, StateCommand};
use leasehold_proto::leasehold::v1 as pb;
use tonic::Status;

impl<R: Replica<AllocatorState>> AdminServer<R> {
    /// Read linearizably, so the backup holds every change acknowledged before the call.
    pub(super) async fn take_backup(&self) -> Result<pb::BackupResponse, Status> {
        let taken = self
            .read(|s| {
                let now = s.ledger().now();
                let bytes = s.backup(now)?;
                let policies = s.policies().len() as u64;
                Ok((bytes, s.ledger().config().grantor_id.clone(), now, policies))
            })
            .await?;
        let (backup, cluster, taken_at, policies) =
            taken.map_err(|e: AdminError| super::admin_status(&e))?;
        Ok(pb::BackupResponse {
            backup,
            cluster,
            taken_at_ms: taken_at.0 / 1_000_000,
            policies,
        })
    }

    /// Checked here before proposing, so a file that is not a backup never reaches the log.
    pub(super) async fn restore_from(
        &self,
        actor: String,
        r: pb::RestoreRequest,
    ) -> Result<pb::RestoreResponse, Status> {
        Backup::from_bytes(&r.backup).map_err(|e| super::admin_status(&e))?;
        let cmd = StateCommand::Restore {
            backup: r.backup,
            reason: r.reason,
            actor,
        };
        self.commit(cmd, |out| match out {
            StateOutput::Restored(r) => Ok(pb::RestoreResponse {
                policies: r.policies,
                leases_written_off: r.leases_written_off,
                units_written_off: r.units_written_off,
                epoch: r.epoch,
            }),
            other => Err(other),
        })
        .await
    }
}
