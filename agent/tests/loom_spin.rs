//! loom model of the spin lock guarding local limiters: holders exclude each other, and each
//! holder sees every write of the holders before it.
//!
//! Run with `RUSTFLAGS="--cfg leasehold_loom" cargo test -p leasehold-agent --release --test loom_spin`.
#![cfg(leasehold_loom)]

use leasehold_agent::engine::models::bounded;
use leasehold_agent::engine::models::SpinLock;
use loom::sync::Arc;
use loom::thread;

/// Two fields written apart under the lock: a second holder inside at the same time would
/// see them differ (and loom reports the unsynchronised access to the cell itself).
#[test]
fn holders_exclude_each_other_and_lose_no_update() {
    bounded().check(|| {
        let lock = Arc::new(SpinLock::new((0u64, 0u64)));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let lock = Arc::clone(&lock);
                thread::spawn(move || {
                    let mut g = lock.lock();
                    let (a, b) = *g;
                    assert_eq!(a, b, "another holder was inside the section");
                    g.0 = a + 1;
                    thread::yield_now();
                    g.1 = b + 1;
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), (2, 2), "an update was lost");
    });
}

/// `try_lock` never hands out a second guard while one is held, and a released lock is
/// free again with the holder's write visible.
#[test]
fn try_lock_respects_a_holder() {
    bounded().check(|| {
        let lock = Arc::new(SpinLock::new(0u64));
        let other = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                if let Some(mut g) = lock.try_lock() {
                    *g += 1;
                    true
                } else {
                    false
                }
            })
        };
        {
            let mut g = lock.lock();
            *g += 10;
        }
        let other_won = other.join().unwrap();
        let expected = if other_won { 11 } else { 10 };
        assert_eq!(*lock.try_lock().expect("free after both"), expected);
    });
}
