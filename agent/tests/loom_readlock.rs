//! loom model of the key table's striped read lock: a reader never sees a writer's change
//! half done, a writer never runs alongside a reader, and no write is lost.
//!
//! Every loom thread runs on one OS thread, so all readers share one stripe here; the model
//! checks the flag-and-count handshake (a store then a load on each side), which is what
//! each stripe does on its own.
//!
//! Run with `RUSTFLAGS="--cfg leasehold_loom" cargo test -p leasehold-agent --release --test loom_readlock`.
#![cfg(leasehold_loom)]

use leasehold_agent::engine::models::ReadStripedLock;
use loom::sync::Arc;
use loom::thread;

fn bounded() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    // Waiting readers and the waiting writer spin (yielding to loom each round), and each
    // round is a branch; the default bound of 1 000 is too tight for three threads.
    builder.max_branches = builder.max_branches.max(20_000);
    builder
}

#[test]
fn readers_never_see_a_half_done_write() {
    bounded().check(|| {
        let lock = Arc::new(ReadStripedLock::new((0u64, 0u64), 2));
        let reader = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                lock.read(|&(a, b)| {
                    assert_eq!(a, b, "torn read");
                    a
                })
            })
        };
        let writer = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                lock.write(|v| {
                    v.0 += 1;
                    thread::yield_now();
                    v.1 += 1;
                })
            })
        };
        lock.write(|v| {
            v.0 += 1;
            v.1 += 1;
        });
        let seen = reader.join().unwrap();
        writer.join().unwrap();
        assert!(seen <= 2);
        assert_eq!(lock.read(|v| *v), (2, 2), "a write was lost");
    });
}

/// A reader racing a writer sees the value before or after the write, never another, and
/// a read after the writer is done sees its change.
#[test]
fn a_reader_sees_a_write_whole_or_not_at_all() {
    bounded().check(|| {
        let lock = Arc::new(ReadStripedLock::new(0u64, 1));
        let reader = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || lock.read(|v| *v))
        };
        lock.write(|v| *v = 7);
        let seen = reader.join().unwrap();
        assert!(seen == 0 || seen == 7, "read {seen}");
        assert_eq!(lock.read(|v| *v), 7);
    });
}
