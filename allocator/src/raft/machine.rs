//! [`MachineApplier`]: runs a [`Machine`] behind the Raft state machine.
//!
//! Wire formats (postcard):
//! - a log entry's payload is a batch, `Vec<M::Command>`, applied in order at the entry's time;
//! - its response is a [`BatchResult`]: one output per command, or why the batch was refused
//!   before anything in it was applied;
//! - a snapshot is a format version byte ([`SNAPSHOT_FORMAT`]) and then a [`MachineSnapshot`]:
//!   the whole machine plus the timeline it had reached, so a node restored from a snapshot
//!   knows where the replicated time stands. The version lets a later release recognise, and
//!   still read, the snapshots an earlier one wrote.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use leasehold_common::time::Nanos;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::time::{AppliedTime, TimeSource};
use crate::replica::Machine;
use crate::storage::{Applier, ApplierError};

/// Why a batch was not applied; nothing in it changed the state.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[error("batch at log index {log_index} refused: {reason}")]
pub struct BatchRefused {
    /// Index of the entry that carried the batch.
    pub log_index: u64,
    /// Why it was refused.
    pub reason: String,
}

/// The response to one replicated batch.
pub type BatchResult<O> = Result<Vec<O>, BatchRefused>;

#[derive(Serialize)]
struct MachineSnapshotRef<'a, M> {
    timeline_ns: u64,
    machine: &'a M,
}

/// Format version of a machine snapshot, its first byte. Version 1 was the unversioned layout
/// of earlier releases, which could not read back a state that held policy documents;
/// version 2 is read through [`Machine::from_earlier_snapshot`] (the allocator's state before
/// it recorded usage).
pub const SNAPSHOT_FORMAT: u8 = 3;

/// A snapshot of the application state: the machine and the replicated time it had reached.
#[derive(Debug, Deserialize)]
pub struct MachineSnapshot<M> {
    /// The replicated time of the last applied command, in nanoseconds.
    pub timeline_ns: u64,
    /// The machine.
    pub machine: M,
}

/// State shared between the Raft state machine (which writes it) and the node (which reads it).
pub struct SharedMachine<M> {
    machine: RwLock<M>,
    applied: AppliedTime,
    /// The furthest-projecting command this node appended to its log (see `raft::time`).
    received: Arc<AppliedTime>,
}

impl<M: Machine> SharedMachine<M> {
    /// Shares `machine`, with no applied time yet.
    pub fn new(machine: M) -> Self {
        Self {
            machine: RwLock::new(machine),
            applied: AppliedTime::default(),
            received: Arc::default(),
        }
    }

    /// Read access to the applied state.
    pub fn read(&self) -> RwLockReadGuard<'_, M> {
        // `apply` runs whole commands under the lock; a panic inside one is a bug that stops the
        // node's state machine, and reads of the state it left behind stay meaningful.
        self.machine.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, M> {
        self.machine.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the replicated time stood at the last applied command or restored snapshot.
    pub fn applied_time(&self) -> &AppliedTime {
        &self.applied
    }

    /// The furthest-projecting command time this node appended to its log.
    pub fn received_time(&self) -> &Arc<AppliedTime> {
        &self.received
    }

    /// The anchor a leader stamps from: the applied or the received one, whichever projects
    /// further.
    pub fn time_anchor(&self) -> Option<super::time::Anchor> {
        super::time::furthest(self.applied.anchor(), self.received.anchor())
    }
}

/// Encodes a batch of commands as a log entry payload.
pub fn encode_batch<C: Serialize>(commands: &[C]) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(commands)
}

/// Decodes the response payload of a batch entry.
pub fn decode_batch_result<O: for<'de> Deserialize<'de>>(
    payload: &[u8],
) -> Result<BatchResult<O>, postcard::Error> {
    postcard::from_bytes(payload)
}

/// Encodes the snapshot form of `machine` at `timeline_ns`, behind [`SNAPSHOT_FORMAT`].
pub fn encode_snapshot<M: Machine>(
    machine: &M,
    timeline_ns: u64,
) -> Result<Vec<u8>, postcard::Error> {
    let snapshot = MachineSnapshotRef {
        timeline_ns,
        machine,
    };
    postcard::to_io(&snapshot, vec![SNAPSHOT_FORMAT])
}

/// Decodes a snapshot written by [`encode_snapshot`].
pub fn decode_snapshot<M: Machine>(bytes: &[u8]) -> Result<MachineSnapshot<M>, ApplierError> {
    let invalid = |reason: String| ApplierError::InvalidSnapshot {
        len_bytes: bytes.len(),
        reason,
    };
    match bytes.split_first() {
        Some((&SNAPSHOT_FORMAT, body)) => postcard::from_bytes(body).map_err(|e| {
            invalid(format!(
                "format {SNAPSHOT_FORMAT} does not decode as this machine: {e}"
            ))
        }),
        Some((&found, body)) => match M::from_earlier_snapshot(found, body) {
            Some(Ok((timeline_ns, machine))) => Ok(MachineSnapshot {
                timeline_ns,
                machine,
            }),
            Some(Err(e)) => Err(invalid(format!(
                "format {found} does not decode as this machine: {e}"
            ))),
            None => Err(invalid(format!(
                "format version {found}; this release reads version {SNAPSHOT_FORMAT}"
            ))),
        },
        None => Err(invalid("empty".to_owned())),
    }
}

/// The [`Applier`] of a [`Machine`]: decodes batches, applies them, records the applied time.
pub struct MachineApplier<M> {
    shared: Arc<SharedMachine<M>>,
    time: Arc<dyn TimeSource>,
    /// Replicated time of the last applied command (the storage already keeps it non-decreasing).
    timeline_ns: u64,
}

impl<M: Machine> MachineApplier<M> {
    /// An applier over `shared`; `time` supplies the monotonic readings of applied anchors.
    pub fn new(shared: Arc<SharedMachine<M>>, time: Arc<dyn TimeSource>) -> Self {
        Self {
            shared,
            time,
            timeline_ns: 0,
        }
    }

    fn apply_batch(&mut self, log_index: u64, leader_time_ns: u64, payload: &[u8]) -> Vec<u8> {
        let result: BatchResult<M::Output> = match postcard::from_bytes::<Vec<M::Command>>(payload)
        {
            Ok(commands) => {
                let mut machine = self.shared.write();
                Ok(commands
                    .into_iter()
                    .map(|c| machine.apply(Nanos(leader_time_ns), c))
                    .collect())
            }
            Err(e) => Err(BatchRefused {
                log_index,
                reason: format!(
                    "payload of {} bytes is not a command batch: {e}",
                    payload.len()
                ),
            }),
        };
        encode_result(log_index, &result)
    }
}

fn encode_result<O: Serialize>(log_index: u64, result: &BatchResult<O>) -> Vec<u8> {
    postcard::to_allocvec(result).unwrap_or_else(|e| {
        // The state changed but the outputs cannot travel; the proposer reports the outcome
        // as unknown, which is what it is to the caller.
        let refused: BatchResult<O> = Err(BatchRefused {
            log_index,
            reason: format!("outputs could not be encoded: {e}"),
        });
        postcard::to_allocvec(&refused).unwrap_or_default()
    })
}

impl<M: Machine> Applier for MachineApplier<M> {
    fn apply(&mut self, log_index: u64, leader_time_ns: u64, payload: &[u8]) -> Vec<u8> {
        let out = self.apply_batch(log_index, leader_time_ns, payload);
        self.timeline_ns = leader_time_ns;
        // The anchor is local bookkeeping for the proposer, not replicated state: it pairs the
        // replicated time with when this node saw it.
        self.shared
            .applied
            .record(leader_time_ns, self.time.mono_ns());
        out
    }

    fn snapshot(&self) -> Vec<u8> {
        // Every machine's state is checked to encode when the node starts, so a failure here
        // means a machine whose encoding depends on its contents fails, a bug to surface loudly
        // rather than a snapshot to store half-written.
        encode_snapshot(&*self.shared.read(), self.timeline_ns)
            .expect("machine state encodes with postcard")
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), ApplierError> {
        let decoded = decode_snapshot::<M>(snapshot)?;
        *self.shared.write() = decoded.machine;
        self.timeline_ns = decoded.timeline_ns;
        self.shared
            .applied
            .record(decoded.timeline_ns, self.time.mono_ns());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::time::SystemTimeSource;
    use leasehold_common::ledger::{Command, Ledger, LedgerConfig, LedgerError, Outcome};

    fn applier() -> MachineApplier<Ledger> {
        let shared = Arc::new(SharedMachine::new(Ledger::new(LedgerConfig::root("g"))));
        MachineApplier::new(shared, SystemTimeSource::shared())
    }

    #[test]
    fn batch_applies_every_command_at_the_entry_time() {
        let mut a = applier();
        let payload = encode_batch(&[Command::Tick, Command::SetEpoch { epoch: 7 }]).unwrap();
        let out = a.apply(3, 42, &payload);
        let result: BatchResult<Result<Outcome, LedgerError>> = decode_batch_result(&out).unwrap();
        let outputs = result.unwrap();
        assert_eq!(outputs.len(), 2);
        assert!(matches!(outputs[1], Ok(Outcome::Done)));
        let ledger = a.shared.read();
        assert_eq!((ledger.now(), ledger.epoch()), (Nanos(42), 7));
        drop(ledger);
        assert_eq!(a.shared.applied_time().anchor().unwrap().timeline_ns, 42);
    }

    #[test]
    fn garbage_payload_is_refused_without_touching_state() {
        let mut a = applier();
        let out = a.apply(9, 42, &[0xff, 0xff, 0xff]);
        let result: BatchResult<Result<Outcome, LedgerError>> = decode_batch_result(&out).unwrap();
        assert_eq!(result.unwrap_err().log_index, 9);
        assert_eq!(a.shared.read().now(), Nanos(0));
    }

    #[test]
    fn snapshot_round_trip_restores_machine_and_time() {
        let mut a = applier();
        let payload = encode_batch(&[Command::SetEpoch { epoch: 3 }]).unwrap();
        a.apply(1, 77, &payload);
        let snap = a.snapshot();
        let mut b = applier();
        b.restore(&snap).unwrap();
        assert_eq!(*b.shared.read(), *a.shared.read());
        assert_eq!(b.shared.applied_time().anchor().unwrap().timeline_ns, 77);
        assert!(b.restore(&[1, 2]).is_err());
    }

    #[test]
    fn snapshot_names_its_format_and_refuses_others() {
        let snap = applier().snapshot();
        assert_eq!(snap[0], SNAPSHOT_FORMAT);
        let mut other = snap.clone();
        other[0] = SNAPSHOT_FORMAT + 1;
        let err = applier().restore(&other).unwrap_err().to_string();
        let named = format!("format version {}", SNAPSHOT_FORMAT + 1);
        assert!(err.contains(&named), "{err}");
        assert!(applier()
            .restore(&[])
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }
}
