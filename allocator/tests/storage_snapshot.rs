//! Snapshots: installing replaces the whole state, survives restarts, carries the replicated time
//! floor, and a slow local build never overwrites a newer installed snapshot.

mod storage_support;

use std::io::Cursor;

use leasehold_allocator::raft::{Snapshot, SnapshotMeta};
use leasehold_allocator::storage::snapshot::SnapshotBody;
use leasehold_allocator::storage::{
    open_sled, StateMachineLimits, StateMachineStore, StorageLimits,
};
use openraft::storage::RaftStateMachine;
use openraft::RaftSnapshotBuilder;
use storage_support::{command, log_id, membership, open_at, test_options, CounterApplier};

type Sm = StateMachineStore<CounterApplier>;

fn keys(sm: &Sm) -> Vec<String> {
    sm.applier().counters.keys().cloned().collect()
}

async fn build(sm: &mut Sm) -> Snapshot {
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("snapshot builds")
}

async fn install(sm: &mut Sm, snap: &Snapshot) -> Result<(), openraft::StorageError<u64>> {
    let mut data = sm.begin_receiving_snapshot().await?;
    *data = Cursor::new(snap.snapshot.get_ref().clone());
    sm.install_snapshot(&snap.meta, data).await
}

#[tokio::test]
async fn install_replaces_state_and_survives_restart() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let (_leader_log, mut leader) = open_at(leader_dir.path());
    leader
        .apply([membership(1, 1, &[1, 2, 3]), command(1, 2, "fresh", 500)])
        .await
        .unwrap();
    let snap = build(&mut leader).await;

    {
        let (_log, mut follower) = open_at(follower_dir.path());
        follower
            .apply([command(1, 1, "stale-a", 10), command(1, 2, "stale-b", 20)])
            .await
            .unwrap();
        // The follower also has an older durable snapshot of its own stale state.
        build(&mut follower).await;
        install(&mut follower, &snap).await.unwrap();
        assert_eq!(keys(&follower), ["fresh"]);
        let (applied, mem) = follower.applied_state().await.unwrap();
        assert_eq!(applied, snap.meta.last_log_id);
        assert_eq!(mem, snap.meta.last_membership);
        assert_eq!(follower.leader_time_ns(), 500);
    }

    let (_log, mut follower) = open_at(follower_dir.path());
    assert_eq!(
        keys(&follower),
        ["fresh"],
        "no stale key survives a restart"
    );
    assert_eq!(follower.applier(), leader.applier());
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, snap.meta);
    assert_eq!(current.snapshot.get_ref(), snap.snapshot.get_ref());
    assert_eq!(
        follower.applied_state().await.unwrap().0,
        Some(log_id(1, 2))
    );
}

#[tokio::test]
async fn leader_time_never_decreases_even_across_snapshots() {
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let (_la, mut a) = open_at(dir_a.path());
    // A later leader with a slower clock stamps an earlier time.
    a.apply([command(1, 1, "k", 1_000), command(2, 2, "k", 400)])
        .await
        .unwrap();
    assert_eq!(a.applier().counters["k"].last_time_ns, 1_000);
    let snap = build(&mut a).await;

    let (_lb, mut b) = open_at(dir_b.path());
    install(&mut b, &snap).await.unwrap();
    b.apply([command(2, 3, "j", 700)]).await.unwrap();
    assert_eq!(b.applier().counters["j"].last_time_ns, 1_000);
    b.apply([command(2, 4, "j", 1_200)]).await.unwrap();
    assert_eq!(b.applier().counters["j"].last_time_ns, 1_200);
}

#[tokio::test]
async fn a_slow_build_does_not_replace_a_newer_install() {
    let dir = tempfile::tempdir().unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let (_l, mut sm) = open_at(dir.path());
    sm.apply([command(1, 1, "old", 1)]).await.unwrap();
    // Captured at index 1, finished only after an install of index 5.
    let mut slow = sm.get_snapshot_builder().await;

    let (_lo, mut other) = open_at(other_dir.path());
    let entries: Vec<_> = (1..=5).map(|i| command(1, i, "new", i)).collect();
    other.apply(entries).await.unwrap();
    let newer = build(&mut other).await;
    install(&mut sm, &newer).await.unwrap();

    let late = slow.build_snapshot().await.unwrap();
    assert_eq!(late.meta.last_log_id, Some(log_id(1, 1)));
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, newer.meta);
}

#[tokio::test]
async fn bad_snapshots_are_rejected_without_touching_state() {
    let dir = tempfile::tempdir().unwrap();
    let limits = StorageLimits {
        state_machine: StateMachineLimits {
            snapshot_len_max_bytes: 64,
        },
        ..StorageLimits::default()
    };
    let (_l, mut sm) = open_sled(
        dir.path(),
        &test_options(),
        CounterApplier::default(),
        limits,
    )
    .unwrap();
    sm.apply([command(1, 1, "kept", 5)]).await.unwrap();
    let before = sm.applier().clone();
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(1, 9)),
        snapshot_id: "test".into(),
        ..SnapshotMeta::default()
    };
    let garbage = Snapshot {
        meta: meta.clone(),
        snapshot: Box::new(Cursor::new(vec![1, 0xff, 0xff])),
    };
    assert!(install(&mut sm, &garbage).await.is_err());
    let oversized = Snapshot {
        meta: meta.clone(),
        snapshot: Box::new(Cursor::new(vec![0; 65])),
    };
    let err = install(&mut sm, &oversized).await.unwrap_err();
    assert!(err.to_string().contains("snapshot_len_max_bytes"), "{err}");
    // A well-formed body whose application state the applier refuses.
    let refused = SnapshotBody {
        leader_time_ns: 1,
        applier_state: vec![0xff; 8],
    };
    let refused = Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(refused.encode().unwrap())),
    };
    assert!(install(&mut sm, &refused).await.is_err());

    assert_eq!(sm.applier(), &before);
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 1)));
    assert!(sm.get_current_snapshot().await.unwrap().is_none());
}
