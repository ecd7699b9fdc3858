//! Durability across restarts: what the log store and state machine acknowledged is what a
//! reopened node reads back.

mod storage_support;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leasehold_allocator::raft::{Entry, Vote};
use leasehold_allocator::storage::kv::{KeyRange, ScanOrder};
use leasehold_allocator::storage::{
    open, Keyspace, KvStore, SledKv, StateMachineStore, StorageLimits,
};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{LogState, RaftLogReader, RaftSnapshotBuilder, StorageHelper};
use storage_support::recording_kv::RecordingKv;
use storage_support::{blank, command, log_id, membership, open_at, test_options, CounterApplier};

fn mixed_entries(first: u64, last: u64) -> Vec<Entry> {
    (first..=last)
        .map(|i| match i % 7 {
            0 => blank(2, i),
            3 => membership(2, i, &[1, 2, (i % 5) + 3]),
            _ => command(2, i, &format!("k{}", i % 4), i * 1_000),
        })
        .collect()
}

async fn all_entries(
    log: &mut impl RaftLogReader<leasehold_allocator::raft::TypeConfig>,
) -> Vec<Entry> {
    log.try_get_log_entries(0..).await.expect("read log")
}

#[tokio::test]
async fn log_vote_and_committed_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let written = mixed_entries(1, 120);
    let vote = Vote::new_committed(3, 2);
    {
        let (mut log, _sm) = open_at(dir.path());
        log.blocking_append(written[..60].to_vec()).await.unwrap();
        log.blocking_append(written[60..].to_vec()).await.unwrap();
        log.save_vote(&vote).await.unwrap();
        log.save_committed(Some(log_id(2, 100))).await.unwrap();
    }
    let (mut log, _sm) = open_at(dir.path());
    assert_eq!(all_entries(&mut log).await, written);
    assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 100)));
    assert_eq!(
        log.get_log_state().await.unwrap(),
        LogState {
            last_purged_log_id: None,
            last_log_id: Some(log_id(2, 120)),
        }
    );
}

#[tokio::test]
async fn purge_and_truncate_survive_reopen_without_holes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open_at(dir.path());
        log.blocking_append(mixed_entries(1, 100)).await.unwrap();
        log.purge(log_id(2, 40)).await.unwrap();
        log.truncate(log_id(2, 91)).await.unwrap();
    }
    let (mut log, sm) = open_at(dir.path());
    let entries = all_entries(&mut log).await;
    let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
    assert_eq!(indexes, (41..=90).collect::<Vec<_>>());
    assert_eq!(
        log.get_log_state().await.unwrap(),
        LogState {
            last_purged_log_id: Some(log_id(2, 40)),
            last_log_id: Some(log_id(2, 90)),
        }
    );
    // The purge point never moves backwards.
    log.purge(log_id(2, 10)).await.unwrap();
    assert_eq!(
        log.get_log_state().await.unwrap().last_purged_log_id,
        Some(log_id(2, 40))
    );

    // Purging past the end keeps the purge point as the end of the log, across a restart.
    log.purge(log_id(3, 150)).await.unwrap();
    drop((log, sm));
    let (mut log, _sm) = open_at(dir.path());
    assert!(all_entries(&mut log).await.is_empty());
    assert_eq!(
        log.get_log_state().await.unwrap(),
        LogState {
            last_purged_log_id: Some(log_id(3, 150)),
            last_log_id: Some(log_id(3, 150)),
        }
    );
    log.blocking_append(vec![blank(3, 151)]).await.unwrap();
    assert_eq!(all_entries(&mut log).await, vec![blank(3, 151)]);
}

#[tokio::test]
async fn interrupted_purge_is_completed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let kv = Arc::new(RecordingKv::new(
            SledKv::open(dir.path(), &test_options()).unwrap(),
        ));
        kv.fail_log_deletes.store(true, Ordering::SeqCst);
        let (mut log, _sm) = open(
            kv.clone(),
            CounterApplier::default(),
            StorageLimits::default(),
        )
        .unwrap();
        log.blocking_append(mixed_entries(1, 30)).await.unwrap();
        assert!(
            log.purge(log_id(2, 12)).await.is_err(),
            "deletion was made to fail"
        );
        // The purge point was made durable before any entry went away.
        let raw = kv
            .scan(Keyspace::Log, &KeyRange::all(), ScanOrder::Ascending, 100)
            .unwrap();
        assert_eq!(raw.len(), 30);
    }
    let (mut log, _sm) = open_at(dir.path());
    let indexes: Vec<u64> = all_entries(&mut log)
        .await
        .iter()
        .map(|e| e.log_id.index)
        .collect();
    assert_eq!(indexes, (13..=30).collect::<Vec<_>>());
    assert_eq!(
        log.get_log_state().await.unwrap().last_purged_log_id,
        Some(log_id(2, 12))
    );
}

fn counters(sm: &StateMachineStore<CounterApplier>) -> CounterApplier {
    sm.applier().clone()
}

#[tokio::test]
async fn state_machine_resumes_from_snapshot_and_log_replay() {
    let dir = tempfile::tempdir().unwrap();
    let entries = mixed_entries(1, 80);
    let expected = {
        let (mut log, mut sm) = open_at(dir.path());
        log.blocking_append(entries.clone()).await.unwrap();
        sm.apply(entries[..50].to_vec()).await.unwrap();
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id, Some(log_id(2, 50)));
        log.purge(log_id(2, 50)).await.unwrap();
        sm.apply(entries[50..].to_vec()).await.unwrap();
        log.save_committed(Some(log_id(2, 80))).await.unwrap();
        (counters(&sm), sm.applied_state().await.unwrap())
    };

    let (mut log, mut sm) = open_at(dir.path());
    // Only the snapshot is durable state-machine state; applied entries after it are not claimed.
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(2, 50)));
    assert_ne!(counters(&sm), expected.0);
    // openraft's start-up re-applies the committed tail from the log.
    StorageHelper::new(&mut log, &mut sm)
        .get_initial_state()
        .await
        .unwrap();
    assert_eq!(counters(&sm), expected.0);
    assert_eq!(sm.applied_state().await.unwrap(), expected.1);
}
