//! A lock for critical sections of a few dozen instructions: a local limiter's check.
//!
//! Taking it is one compare-and-swap and releasing it one plain store. A general mutex
//! also releases with a read-modify-write (to find sleeping waiters), and on the hot path
//! each such atomic costs about as much as the limiter's arithmetic. Waiters spin a
//! little, then yield the processor, so a holder preempted inside its section is waited
//! for without every waiter burning its time slice. Sections under this lock never block,
//! allocate or call out.

use crate::sync::{AtomicBool, Ordering, UnsafeCell};
use std::ops::{Deref, DerefMut};

/// Spins before a waiter starts yielding instead.
const SPINS_MAX: u32 = 64;

pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the
// flag's acquire/release pairs order each holder's accesses after the previous one's).
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if !self.try_acquire() {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    /// The guard if the lock is free now.
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // A guard is made only once acquired: one made and dropped would release the lock.
        if self.try_acquire() {
            Some(SpinGuard { lock: self })
        } else {
            None
        }
    }

    #[inline(always)]
    fn try_acquire(&self) -> bool {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            // Wait on plain reads: a failing compare-and-swap would pull the line away
            // from the holder every time.
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS_MAX {
                    spins += 1;
                    crate::sync::spin_loop();
                } else {
                    crate::sync::yield_now();
                }
            }
            if self.try_acquire() {
                return;
            }
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.try_lock() {
            Some(guard) => f.debug_tuple("SpinLock").field(&*guard).finish(),
            None => f.write_str("SpinLock(<locked>)"),
        }
    }
}

/// Holds the lock; releases it when dropped (also while unwinding: the sections under
/// this lock leave their value consistent at every step, so there is nothing to poison).
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        self.lock.value.with(|value| unsafe { &*value })
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        self.lock.value.with_mut(|value| unsafe { &mut *value })
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

// Under loom these would run outside a model; tests/loom_spin.rs models the lock there.
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use super::*;

    /// Increments made under the lock from several threads are all there: none is lost to
    /// two holders at once.
    #[test]
    fn holders_exclude_each_other() {
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 20_000;
        let lock = SpinLock::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        let mut g = lock.lock();
                        // Two fields written apart: a second holder would see them differ.
                        let (a, b) = *g;
                        assert_eq!(a, b, "another holder was inside the section");
                        g.0 = a + 1;
                        std::hint::black_box(&mut *g);
                        g.1 = b + 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), (THREADS * ROUNDS, THREADS * ROUNDS));
    }

    #[test]
    fn a_held_lock_is_not_taken_again_until_released() {
        let lock = SpinLock::new(1);
        let guard = lock.lock();
        assert!(lock.try_lock().is_none());
        assert_eq!(format!("{lock:?}"), "SpinLock(<locked>)");
        drop(guard);
        assert_eq!(*lock.try_lock().expect("released"), 1);
        assert_eq!(format!("{lock:?}"), "SpinLock(1)");
    }

    #[test]
    fn unwinding_releases_the_lock() {
        let lock = SpinLock::new(0);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut g = lock.lock();
            *g = 5;
            panic!("inside the section");
        }));
        assert!(result.is_err());
        assert_eq!(*lock.try_lock().expect("released while unwinding"), 5);
    }
}
