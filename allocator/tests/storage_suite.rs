//! openraft's own conformance suite against the sled-backed storage.

mod storage_support;

use leasehold_allocator::raft::{StorageError, TypeConfig};
use leasehold_allocator::storage::{LogStore, StateMachineStore};
use openraft::testing::{StoreBuilder, Suite};
use storage_support::{open_at, CounterApplier};
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore<CounterApplier>, TempDir>
    for SledBuilder
{
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore<CounterApplier>), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, sm) = open_at(dir.path());
        Ok((dir, log, sm))
    }
}

/// Runs outside any tokio runtime: the suite starts a fresh runtime per case.
#[test]
fn openraft_storage_suite_passes() {
    if let Err(e) = Suite::test_all(SledBuilder) {
        panic!("openraft storage suite failed: {e}");
    }
}
