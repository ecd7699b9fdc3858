//! loom model of the references a request's charges hold to key entries: an entry a charge
//! refers to stays allocated while the charge can reach it, even as the key table evicts
//! it, and every reference is given back exactly once (the entry is freed, once, when the
//! last holder lets go).
//!
//! The entries' reference counts are the standard library's; the model interleaves the steps
//! of a request (charge, read through the charge, undo, keep a unit past the request) with
//! the table's eviction and with another thread releasing the kept unit.
//!
//! Run with `RUSTFLAGS="--cfg leasehold_loom" cargo test -p leasehold-agent --release --test loom_undo`.
#![cfg(leasehold_loom)]

use leasehold_agent::engine::models::bounded;
use leasehold_agent::engine::models::{Request, TableEntry, Unit};
use loom::sync::mpsc::channel;
use loom::thread;

#[test]
fn charges_keep_entries_alive_and_release_them_once() {
    bounded().check(|| {
        let table = TableEntry::new(4);
        let watch = table.watch();
        // Looked up while the table held the entry: one charge counted, one held alive by
        // the request's own reference.
        let mut request = Request::new();
        assert!(request.charge(&table, 0, 1, false));
        assert!(request.charge(&table, 1, 1, true));
        assert!(request.charge(&table, 2, 1, false));

        let (units_tx, units_rx) = channel::<Unit>();
        let worker_watch = table.watch();
        let worker = thread::spawn(move || {
            // What the request reads through its charges is still there.
            for index in 0..3 {
                thread::yield_now();
                assert!(
                    worker_watch.alive(),
                    "an entry a charge refers to was freed"
                );
                assert_eq!(request.key_of(index).as_deref(), Some("k"));
            }
            assert!(request.undo(0), "charged once");
            assert!(!request.undo(0), "undone twice");
            thread::yield_now();
            let unit = request.keep_unit(2).expect("charged");
            units_tx.send(unit).unwrap();
            thread::yield_now();
            assert!(request.undo(1));
            drop(request);
        });
        let releaser = thread::spawn(move || {
            let unit = units_rx.recv().unwrap();
            thread::yield_now();
            unit.release();
        });
        // The table evicts the entry while the request is running.
        thread::yield_now();
        drop(table);

        worker.join().unwrap();
        releaser.join().unwrap();
        assert!(!watch.alive(), "a reference was never given back");
    });
}
