//! A reader-writer lock whose readers write only their own thread's cache line.
//!
//! An ordinary reader-writer lock counts readers in one word, so two threads reading the
//! same key-table shard move that word between their cores on every lookup. Here each
//! reader counts itself in its own stripe and only reads the writer flag; a writer (a new
//! key, an eviction, a sweep: rare next to lookups) raises the flag, waits until every
//! stripe has no reader, and changes the data alone. Readers that find the flag raised step
//! back and wait, so a writer waits only for the readers already inside.
//!
//! Critical sections on both sides are short and do no I/O, so waiting spins briefly and
//! then yields the core.

use super::stripes::Striped;
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, UnsafeCell};

pub struct ReadStripedLock<T> {
    readers: Striped<AtomicU64>,
    writing: AtomicBool,
    /// Serialises writers.
    writer: Mutex<()>,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is read only between a reader's count and its release while no writer is
// inside, and written only by the one writer that raised the flag after every reader left
// (see `read` and `write`); so it is shared like a `RwLock<T>`.
unsafe impl<T: Send> Send for ReadStripedLock<T> {}
unsafe impl<T: Send + Sync> Sync for ReadStripedLock<T> {}

fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        crate::sync::spin_loop();
    } else {
        crate::sync::yield_now();
    }
}

impl<T> ReadStripedLock<T> {
    pub fn new(data: T, stripes: usize) -> Self {
        ReadStripedLock {
            readers: Striped::new(stripes),
            writing: AtomicBool::new(false),
            writer: Mutex::new(()),
            data: UnsafeCell::new(data),
        }
    }

    /// Runs `f` with shared access. `f` must not take this lock again for writing.
    #[inline]
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let count = self.readers.local();
        let mut spins = 0;
        loop {
            // SeqCst on both sides: either this reader sees the flag, or the writer sees
            // this reader's count (a store-load pair needs a full fence).
            count.fetch_add(1, Ordering::SeqCst);
            crate::sync::seqcst_store_load();
            if !self.writing.load(Ordering::SeqCst) {
                break;
            }
            count.fetch_sub(1, Ordering::Release);
            while self.writing.load(Ordering::Acquire) {
                backoff(&mut spins);
            }
        }
        struct Leave<'a>(&'a AtomicU64);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Release);
            }
        }
        let _leave = Leave(count);
        // SAFETY: counted as a reader with no writer inside; a writer waits for the count.
        self.data.with(|data| f(unsafe { &*data }))
    }

    /// Runs `f` with exclusive access.
    pub fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let _writer = self.writer.lock();
        self.writing.store(true, Ordering::SeqCst);
        crate::sync::seqcst_store_load();
        struct Lower<'a>(&'a AtomicBool);
        impl Drop for Lower<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _lower = Lower(&self.writing);
        for count in self.readers.iter() {
            let mut spins = 0;
            while count.load(Ordering::SeqCst) != 0 {
                backoff(&mut spins);
            }
        }
        // SAFETY: the flag keeps new readers out and every counted reader has left; other
        // writers wait on `writer`.
        self.data.with_mut(|data| f(unsafe { &mut *data }))
    }
}

// Under loom these would run outside a model; tests/loom_readlock.rs models the lock there.
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use super::*;

    #[test]
    fn readers_never_see_a_half_done_write() {
        let lock = ReadStripedLock::new((0u64, 0u64), 2);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        lock.read(|&(a, b)| assert_eq!(a, b, "torn read"));
                    }
                });
            }
            s.spawn(|| {
                for i in 1..=2_000u64 {
                    lock.write(|v| {
                        v.0 = i;
                        std::hint::black_box(&*v);
                        v.1 = i;
                    });
                }
            });
        });
        assert_eq!(lock.read(|v| *v), (2_000, 2_000));
    }
}
