//! The replicated state machine, implementing openraft's `RaftStateMachine` over an [`Applier`].
//!
//! # Persistence: snapshot plus log replay
//!
//! Applying a command does not write to disk. The application state is opaque and only exposes
//! whole-state `snapshot`/`restore`, so persisting it per command would cost a full serialisation
//! per entry. Instead every snapshot (built locally or installed from the leader) is written and
//! fsynced before openraft is told about it, and a restart restores the last snapshot and reports
//! its last log id as `last_applied`. openraft then re-applies the committed entries after it from
//! the log (openraft purges only entries a durable snapshot covers). `last_applied` is
//! deliberately *not* persisted on its own: it would claim entries whose effects were lost with
//! the in-memory state.

use std::fmt::Debug;
use std::io::Cursor;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder};

use super::applier::Applier;
use super::codec::{encode, CodecError};
use super::error::{RaftResultExt, StoreError, Subject};
use super::kv::KvStore;
use super::snapshot::{SnapshotBody, SnapshotStore, StoredSnapshot, WritePolicy};
use crate::raft::{
    Entry, LogId, RaftResponse, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};

/// Limits of the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMachineLimits {
    /// Largest snapshot accepted from the leader, in bytes.
    pub snapshot_len_max_bytes: usize,
}

impl Default for StateMachineLimits {
    fn default() -> Self {
        Self {
            snapshot_len_max_bytes: 256 * 1024 * 1024,
        }
    }
}

/// The Raft state machine: log bookkeeping around an application [`Applier`].
pub struct StateMachineStore<A: Applier> {
    applier: A,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    /// Largest leader time applied so far; commands are applied with at least this time so that
    /// replicated time never decreases across leader changes.
    leader_time_ns: u64,
    snapshots: SnapshotStore,
    limits: StateMachineLimits,
    /// Distinguishes snapshots built at the same log id within one process.
    snapshot_seq: u64,
}

impl<A: Applier> Debug for StateMachineStore<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachineStore")
            .field("last_applied", &self.last_applied)
            .field("membership", &self.membership)
            .field("leader_time_ns", &self.leader_time_ns)
            .finish_non_exhaustive()
    }
}

impl<A: Applier> StateMachineStore<A> {
    /// Opens the state machine over `kv`. `applier` must hold the empty initial state; if a
    /// snapshot is stored it is restored into `applier`.
    pub fn open(
        kv: Arc<dyn KvStore>,
        mut applier: A,
        limits: StateMachineLimits,
    ) -> Result<Self, StoreError> {
        if limits.snapshot_len_max_bytes == 0 {
            return Err(StoreError::ZeroLimit {
                field: "snapshot_len_max_bytes",
            });
        }
        let snapshots = SnapshotStore::new(kv);
        match snapshots.load()? {
            Some(stored) => {
                let body = SnapshotBody::decode(&stored.body)?;
                applier.restore(&body.applier_state)?;
                Ok(Self {
                    applier,
                    last_applied: stored.meta.last_log_id,
                    membership: stored.meta.last_membership,
                    leader_time_ns: body.leader_time_ns,
                    snapshots,
                    limits,
                    snapshot_seq: 0,
                })
            }
            None => Ok(Self {
                applier,
                last_applied: None,
                membership: StoredMembership::default(),
                leader_time_ns: 0,
                snapshots,
                limits,
                snapshot_seq: 0,
            }),
        }
    }

    /// The application state.
    pub fn applier(&self) -> &A {
        &self.applier
    }

    /// Id of the last applied entry.
    pub fn last_applied(&self) -> Option<&LogId> {
        self.last_applied.as_ref()
    }

    /// The replicated time floor: the largest leader time applied so far, in nanoseconds.
    pub fn leader_time_ns(&self) -> u64 {
        self.leader_time_ns
    }

    fn apply_entry(&mut self, entry: Entry) -> RaftResponse {
        let payload = match entry.payload {
            EntryPayload::Blank => Vec::new(),
            EntryPayload::Normal(command) => {
                self.leader_time_ns = self.leader_time_ns.max(command.leader_time_ns);
                self.applier
                    .apply(entry.log_id.index, self.leader_time_ns, &command.payload)
            }
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(entry.log_id), membership);
                Vec::new()
            }
        };
        self.last_applied = Some(entry.log_id);
        RaftResponse { payload }
    }

    fn snapshot_id(&mut self) -> String {
        self.snapshot_seq += 1;
        match &self.last_applied {
            Some(id) => format!("{}-{}-{}", id.leader_id, id.index, self.snapshot_seq),
            None => format!("none-{}", self.snapshot_seq),
        }
    }
}

/// Writes a point-in-time copy of the state machine as the current snapshot.
pub struct SnapshotBuilder {
    snapshots: SnapshotStore,
    meta: SnapshotMeta,
    /// The encoded body, or why it could not be encoded (reported when the build runs).
    body: Result<Vec<u8>, CodecError>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let body = self.body.clone().raft(Subject::WriteSnapshot)?;
        let stored = StoredSnapshot {
            meta: self.meta.clone(),
            body: body.clone(),
        };
        let written = self
            .snapshots
            .save(stored, WritePolicy::KeepNewer)
            .await
            .raft(Subject::WriteSnapshot)?;
        if !written {
            tracing::info!(snapshot = %self.meta, "newer snapshot already stored; built snapshot not kept");
        }
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: Box::new(Cursor::new(body)),
        })
    }
}

impl<A: Applier> RaftStateMachine<TypeConfig> for StateMachineStore<A> {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<RaftResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        Ok(entries.into_iter().map(|e| self.apply_entry(e)).collect())
    }

    /// Captures the state eagerly: openraft runs the builder in its own task while applying
    /// continues, so the builder must hold a consistent copy.
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let body = SnapshotBody {
            leader_time_ns: self.leader_time_ns,
            applier_state: self.applier.snapshot(),
        };
        SnapshotBuilder {
            snapshots: self.snapshots.clone(),
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id: self.snapshot_id(),
            },
            body: encode("snapshot body", &body),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let max_bytes = self.limits.snapshot_len_max_bytes;
        if data.len() > max_bytes {
            let err = StoreError::SnapshotTooLarge {
                len_bytes: data.len(),
                max_bytes,
            };
            return Err(err.into_raft(Subject::WriteSnapshot));
        }
        let body = SnapshotBody::decode(&data).raft(Subject::WriteSnapshot)?;
        // Restore first: a body the application rejects must not become the durable snapshot.
        self.applier
            .restore(&body.applier_state)
            .raft(Subject::WriteStateMachine)?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            body: data,
        };
        self.snapshots
            .save(stored, WritePolicy::Replace)
            .await
            .raft(Subject::WriteSnapshot)?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.leader_time_ns = body.leader_time_ns;
        tracing::info!(snapshot = %meta, "installed snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let stored = self.snapshots.load().raft(Subject::ReadSnapshot)?;
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.body)),
        }))
    }
}
