//! The log store makes writes durable before it acknowledges them, and orders purge writes so
//! that no crash point can show a hole.

mod storage_support;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leasehold_allocator::raft::Vote;
use leasehold_allocator::storage::{open, Keyspace, LogStore, SledKv, StorageLimits};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use storage_support::recording_kv::{Event, RecordingKv};
use storage_support::{blank, log_id, test_options, CounterApplier};
use tempfile::TempDir;

fn recorded_store() -> (TempDir, Arc<RecordingKv>, LogStore) {
    let dir = tempfile::tempdir().unwrap();
    let kv = Arc::new(RecordingKv::new(
        SledKv::open(dir.path(), &test_options()).unwrap(),
    ));
    let (log, _sm) = open(
        kv.clone(),
        CounterApplier::default(),
        StorageLimits::default(),
    )
    .unwrap();
    kv.take_events();
    (dir, kv, log)
}

fn log_batch() -> Event {
    Event::Batch {
        puts: vec![Keyspace::Log],
        deletes: vec![],
    }
}

fn log_delete_batch() -> Event {
    Event::Batch {
        puts: vec![],
        deletes: vec![Keyspace::Log],
    }
}

#[tokio::test]
async fn append_is_one_batch_then_a_flush_before_completion() {
    let (_dir, kv, mut log) = recorded_store();
    log.blocking_append((1..=50).map(|i| blank(1, i)))
        .await
        .unwrap();
    assert_eq!(kv.take_events(), vec![log_batch(), Event::Flush]);
}

#[tokio::test]
async fn append_reports_a_failed_flush_instead_of_completing() {
    let (_dir, kv, mut log) = recorded_store();
    kv.fail_flush.store(true, Ordering::SeqCst);
    // `blocking_append` waits for the completion callback, so this also fails if the callback
    // reported success without a durable write.
    assert!(log.blocking_append([blank(1, 1)]).await.is_err());
}

#[tokio::test]
async fn vote_is_flushed_before_save_vote_returns() {
    let (_dir, kv, mut log) = recorded_store();
    log.save_vote(&Vote::new(4, 2)).await.unwrap();
    assert_eq!(
        kv.take_events(),
        vec![Event::Put(Keyspace::Meta), Event::Flush]
    );
    kv.fail_flush.store(true, Ordering::SeqCst);
    assert!(log.save_vote(&Vote::new(5, 2)).await.is_err());
}

#[tokio::test]
async fn purge_persists_its_point_before_deleting_in_bounded_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let kv = Arc::new(RecordingKv::new(
        SledKv::open(dir.path(), &test_options()).unwrap(),
    ));
    let mut limits = StorageLimits::default();
    limits.log.delete_chunk_entries = 16;
    let (mut log, _sm) = open(kv.clone(), CounterApplier::default(), limits).unwrap();
    log.blocking_append((1..=100).map(|i| blank(1, i)))
        .await
        .unwrap();
    kv.take_events();

    log.purge(log_id(1, 40)).await.unwrap();
    let events = kv.take_events();
    assert_eq!(events[..2], [Event::Put(Keyspace::Meta), Event::Flush]);
    // 40 entries in chunks of at most 16.
    assert_eq!(
        events[2..],
        [log_delete_batch(), log_delete_batch(), log_delete_batch()]
    );

    log.truncate(log_id(1, 90)).await.unwrap();
    assert_eq!(kv.take_events(), vec![log_delete_batch(), Event::Flush]);
}
