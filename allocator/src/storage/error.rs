//! Errors of the Raft storage layer and their translation into openraft's storage errors.

use openraft::{AnyError, StorageIOError};
use thiserror::Error;

use super::applier::ApplierError;
use super::codec::CodecError;
use super::kv::KvError;
use crate::raft::StorageError;

/// Failure inside the Raft log store or state machine.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The key-value engine failed.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// A stored value could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The application rejected a snapshot.
    #[error(transparent)]
    Applier(#[from] ApplierError),
    /// A read of consecutive log entries found a missing index.
    #[error("log has a hole: expected entry {expected_index}, found entry {found_index}")]
    LogHole {
        /// The index that should have come next.
        expected_index: u64,
        /// The index that was found instead.
        found_index: u64,
    },
    /// A received snapshot is larger than the configured limit.
    #[error("snapshot of {len_bytes} bytes exceeds snapshot_len_max_bytes = {max_bytes}")]
    SnapshotTooLarge {
        /// Size of the rejected snapshot.
        len_bytes: usize,
        /// The configured limit.
        max_bytes: usize,
    },
    /// A configured limit is zero, which would make the store unable to make progress.
    #[error("storage limit `{field}` is 0; it must be at least 1")]
    ZeroLimit {
        /// Name of the offending limit.
        field: &'static str,
    },
    /// A blocking storage task (e.g. an fsync) panicked or was cancelled.
    #[error("blocking storage task `{task}` did not complete: {reason}")]
    BlockingTask {
        /// Which task failed.
        task: &'static str,
        /// Why it did not complete.
        reason: String,
    },
}

/// Which openraft error subject a failure is reported under.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Subject {
    ReadLogs,
    WriteLogs,
    ReadVote,
    WriteVote,
    WriteStateMachine,
    ReadSnapshot,
    WriteSnapshot,
}

impl StoreError {
    /// Wraps the error as openraft's storage error for `subject`.
    pub(crate) fn into_raft(self, subject: Subject) -> StorageError {
        let source = AnyError::new(&self);
        let io = match subject {
            Subject::ReadLogs => StorageIOError::read_logs(source),
            Subject::WriteLogs => StorageIOError::write_logs(source),
            Subject::ReadVote => StorageIOError::read_vote(source),
            Subject::WriteVote => StorageIOError::write_vote(source),
            Subject::WriteStateMachine => StorageIOError::write_state_machine(source),
            Subject::ReadSnapshot => StorageIOError::read_snapshot(None, source),
            Subject::WriteSnapshot => StorageIOError::write_snapshot(None, source),
        };
        io.into()
    }
}

/// Shorthand for mapping a storage-layer result into openraft's error type.
// openraft's storage error is large, but its trait methods return it by value, so boxing it
// here would only move the copy.
#[allow(clippy::result_large_err)]
pub(crate) trait RaftResultExt<T> {
    /// Maps the error into openraft's storage error for `subject`.
    fn raft(self, subject: Subject) -> Result<T, StorageError>;
}

#[allow(clippy::result_large_err)]
impl<T, E: Into<StoreError>> RaftResultExt<T> for Result<T, E> {
    fn raft(self, subject: Subject) -> Result<T, StorageError> {
        self.map_err(|e| e.into().into_raft(subject))
    }
}

thread_local! {
    static INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// From now on, blocking storage calls made on this thread run on it instead of tokio's
/// blocking pool. For a deterministic simulation whose hosts all run on one thread: a call
/// on the pool finishes at a moment of real time that the simulated clock cannot order.
pub fn run_blocking_inline_on_this_thread() {
    INLINE.with(|c| c.set(true));
}

/// Runs a blocking engine call (such as an fsync) off the async worker threads.
pub(crate) async fn blocking<T, F>(task: &'static str, f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    if INLINE.with(std::cell::Cell::get) {
        return f();
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::BlockingTask {
            task,
            reason: e.to_string(),
        })?
}
