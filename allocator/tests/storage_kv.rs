//! The sled implementation honours the key-value contract the Raft storage relies on.

mod storage_support;

use std::ops::Bound;
use std::sync::Arc;

use leasehold_allocator::storage::kv::{KeyRange, ScanOrder, WriteBatch};
use leasehold_allocator::storage::{
    open, Keyspace, KvError, KvStore, LogStoreLimits, SledKv, StateMachineLimits, StorageLimits,
    StoreError,
};
use storage_support::{test_options, CounterApplier};

fn kv_at(path: &std::path::Path) -> SledKv {
    SledKv::open(path, &test_options()).expect("sled opens")
}

fn keys(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    pairs.iter().map(|(k, _)| k[0]).collect()
}

#[test]
fn point_ops_are_isolated_per_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let kv = kv_at(dir.path());
    kv.put(Keyspace::Meta, b"k", b"meta").unwrap();
    kv.put(Keyspace::State, b"k", b"state").unwrap();
    assert_eq!(
        kv.get(Keyspace::Meta, b"k").unwrap(),
        Some(b"meta".to_vec())
    );
    assert_eq!(
        kv.get(Keyspace::State, b"k").unwrap(),
        Some(b"state".to_vec())
    );
    assert_eq!(kv.get(Keyspace::Log, b"k").unwrap(), None);
    kv.delete(Keyspace::Meta, b"k").unwrap();
    kv.delete(Keyspace::Meta, b"absent").unwrap();
    assert_eq!(kv.get(Keyspace::Meta, b"k").unwrap(), None);
    assert_eq!(
        kv.get(Keyspace::State, b"k").unwrap(),
        Some(b"state".to_vec())
    );
}

#[test]
fn scans_respect_bounds_order_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let kv = kv_at(dir.path());
    for k in 1..=9u8 {
        kv.put(Keyspace::Log, &[k], &[k * 10]).unwrap();
    }
    let range = |s, e| KeyRange { start: s, end: e };
    let r = range(Bound::Included(vec![3]), Bound::Excluded(vec![7]));
    let asc = kv
        .scan(Keyspace::Log, &r, ScanOrder::Ascending, 100)
        .unwrap();
    assert_eq!(keys(&asc), [3, 4, 5, 6]);
    assert_eq!(asc[0].1, vec![30]);
    let desc = kv
        .scan(Keyspace::Log, &r, ScanOrder::Descending, 2)
        .unwrap();
    assert_eq!(keys(&desc), [6, 5]);
    let r = range(Bound::Excluded(vec![7]), Bound::Unbounded);
    assert_eq!(
        keys(&kv.scan(Keyspace::Log, &r, ScanOrder::Ascending, 9).unwrap()),
        [8, 9]
    );
    let inverted = range(Bound::Included(vec![7]), Bound::Excluded(vec![3]));
    assert!(kv
        .scan(Keyspace::Log, &inverted, ScanOrder::Ascending, 9)
        .unwrap()
        .is_empty());
    assert!(matches!(
        kv.scan(Keyspace::Log, &KeyRange::all(), ScanOrder::Ascending, 0),
        Err(KvError::ZeroScanLimit {
            keyspace: Keyspace::Log
        })
    ));
}

#[test]
fn batches_span_keyspaces_and_flushed_writes_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let kv = kv_at(dir.path());
        kv.put(Keyspace::Log, &[1], b"old").unwrap();
        let mut batch = WriteBatch::new();
        batch.put(Keyspace::Log, vec![2], b"two".to_vec());
        batch.delete(Keyspace::Log, vec![1]);
        batch.put(Keyspace::Meta, b"vote".to_vec(), b"v".to_vec());
        batch.put(Keyspace::State, b"snap".to_vec(), b"s".to_vec());
        // Later operations on the same key win.
        batch.put(Keyspace::State, b"snap".to_vec(), b"s2".to_vec());
        kv.write(batch).unwrap();
        kv.flush().unwrap();
        assert!(kv.size_on_disk_bytes().unwrap() > 0);
    }
    let kv = kv_at(dir.path());
    let log = kv
        .scan(Keyspace::Log, &KeyRange::all(), ScanOrder::Ascending, 10)
        .unwrap();
    assert_eq!(log, vec![(vec![2], b"two".to_vec())]);
    assert_eq!(
        kv.get(Keyspace::Meta, b"vote").unwrap(),
        Some(b"v".to_vec())
    );
    assert_eq!(
        kv.get(Keyspace::State, b"snap").unwrap(),
        Some(b"s2".to_vec())
    );
}

#[test]
fn zero_limits_are_rejected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let kv: Arc<dyn KvStore> = Arc::new(kv_at(dir.path()));
    let cases = [
        (
            StorageLimits {
                log: LogStoreLimits {
                    read_entries_max: 0,
                    ..LogStoreLimits::default()
                },
                ..StorageLimits::default()
            },
            "read_entries_max",
        ),
        (
            StorageLimits {
                log: LogStoreLimits {
                    delete_chunk_entries: 0,
                    ..LogStoreLimits::default()
                },
                ..StorageLimits::default()
            },
            "delete_chunk_entries",
        ),
        (
            StorageLimits {
                state_machine: StateMachineLimits {
                    snapshot_len_max_bytes: 0,
                },
                ..StorageLimits::default()
            },
            "snapshot_len_max_bytes",
        ),
    ];
    for (limits, name) in cases {
        match open(Arc::clone(&kv), CounterApplier::default(), limits) {
            Err(StoreError::ZeroLimit { field }) => assert_eq!(field, name),
            other => panic!(
                "limit {name}: expected ZeroLimit, got {:?}",
                other.map(|_| ())
            ),
        }
    }
}
