//! Disk use stays bounded when the log churns: entries are appended, snapshotted and purged over
//! and over, as a long-running allocator does.

mod storage_support;

use std::path::Path;

use leasehold_allocator::raft::{Entry, RaftCommand};
use leasehold_allocator::storage::LogStore;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{EntryPayload, RaftLogReader, RaftSnapshotBuilder};
use storage_support::{log_id, open_at};

const ROUNDS: u64 = 30;
const ENTRIES_PER_ROUND: u64 = 2_000;
const ENTRIES_PER_APPEND: u64 = 200;
const PAYLOAD_BYTES: usize = 200;
/// Observed steady state is 2.5-3 MiB whatever the number of rounds; linear growth would pass
/// 11 MiB by the last round.
const DIR_SIZE_MAX_BYTES: u64 = 6 * 1024 * 1024;
/// Entries kept behind the snapshot, as openraft keeps some for slow followers.
const KEEP_ENTRIES: u64 = 100;

fn dir_size_bytes(path: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(path).expect("read dir") {
        let entry = entry.expect("dir entry");
        let meta = entry.metadata().expect("metadata");
        total += if meta.is_dir() {
            dir_size_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

fn entry(index: u64) -> Entry {
    let mut payload = vec![b'x'; PAYLOAD_BYTES];
    // Spread commands over a few keys so the application state stays small and realistic.
    payload[..8].copy_from_slice(&(index % 64).to_be_bytes());
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(RaftCommand {
            payload,
            leader_time_ns: index,
        }),
    }
}

async fn append_round(log: &mut LogStore, first: u64) -> Vec<Entry> {
    let mut all = Vec::new();
    let mut start = first;
    while start < first + ENTRIES_PER_ROUND {
        let batch: Vec<Entry> = (start..start + ENTRIES_PER_APPEND).map(entry).collect();
        log.blocking_append(batch.clone()).await.unwrap();
        all.extend(batch);
        start += ENTRIES_PER_APPEND;
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_use_stays_bounded_under_append_and_purge_churn() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, mut sm) = open_at(dir.path());
    let written_per_round_bytes = ENTRIES_PER_ROUND * PAYLOAD_BYTES as u64;
    let mut sizes = Vec::new();
    let mut next = 1;
    for _ in 0..ROUNDS {
        let entries = append_round(&mut log, next).await;
        next += ENTRIES_PER_ROUND;
        sm.apply(entries).await.unwrap();
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let snap_index = snap.meta.last_log_id.unwrap().index;
        log.purge(log_id(1, snap_index - KEEP_ENTRIES))
            .await
            .unwrap();
        sizes.push(dir_size_bytes(dir.path()));
    }

    let live = log.try_get_log_entries(0..).await.unwrap();
    assert_eq!(live.len() as u64, KEEP_ENTRIES, "purge keeps only the tail");
    let total_written_bytes = ROUNDS * written_per_round_bytes;
    let max_size = *sizes.iter().max().unwrap();
    let third = sizes.len() / 3;
    let early_max = *sizes[..third].iter().max().unwrap();
    let late_max = *sizes[2 * third..].iter().max().unwrap();
    println!(
        "payload written {} KiB; directory size per round (KiB): {:?}",
        total_written_bytes / 1024,
        sizes.iter().map(|s| s / 1024).collect::<Vec<_>>()
    );
    // Linear growth would make the last third about 3x the first third.
    assert!(
        late_max <= early_max * 2,
        "disk use keeps growing: early max {early_max} B, late max {late_max} B"
    );
    assert!(
        max_size < DIR_SIZE_MAX_BYTES,
        "directory reached {max_size} B for {total_written_bytes} B of payload written"
    );
}
