//! The atomics, cell and waiting used by the agent's hand-written synchronisation (the
//! spin lock, the striped read lock, credit slots), so that the same code runs under
//! `loom` when built with `RUSTFLAGS="--cfg leasehold_loom"`. The cfg has a name of its
//! own: RUSTFLAGS reach every dependency, and under the usual `--cfg loom` tokio leaves out
//! its networking, so nothing that uses it would build.
//!
//! loom checks a model by running it under every interleaving and every outcome the memory
//! model allows for the operations it can see; it sees only its own atomics, cells and
//! yields. Ordinary builds use the standard types through zero-cost wrappers (the cell's
//! accessors take closures only because loom's must, to know how long an access lasts),
//! so nothing changes there. The models are in `tests/loom_*.rs`.

#[cfg(not(leasehold_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

#[cfg(leasehold_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Serialises writers of the striped read lock. Under loom a blocking lock of its own: a
/// real one would block the single thread loom runs every modelled thread on.
#[cfg(not(leasehold_loom))]
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

#[cfg(leasehold_loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(leasehold_loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        // A holder that panicked ends the model anyway.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An `UnsafeCell` whose accesses loom can check for data races.
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(not(leasehold_loom))] std::cell::UnsafeCell<T>,
    #[cfg(leasehold_loom)] loom::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(not(leasehold_loom))]
        return UnsafeCell(std::cell::UnsafeCell::new(value));
        #[cfg(leasehold_loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
    }

    /// Runs `f` with a pointer for reading; the read lasts as long as `f`.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(leasehold_loom))]
        return f(self.0.get());
        #[cfg(leasehold_loom)]
        return self.0.with(f);
    }

    /// Runs `f` with a pointer for writing; the write lasts as long as `f`.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(leasehold_loom))]
        return f(self.0.get());
        #[cfg(leasehold_loom)]
        return self.0.with_mut(f);
    }
}

/// Between a SeqCst store and a SeqCst load of another atomic, so that each of two threads
/// doing this sees the other's store or is seen by it. The SeqCst accesses already order
/// them, so nothing is emitted; loom, though, treats SeqCst accesses as AcqRel (its
/// README, "Unsupported features") and would report races that cannot happen, so under
/// loom this is the SeqCst fence those accesses amount to.
#[inline(always)]
pub(crate) fn seqcst_store_load() {
    #[cfg(leasehold_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// One round of waiting for another thread. Under loom a yield: loom must run the other
/// thread, and a spin it cannot see would never end.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(not(leasehold_loom))]
    std::hint::spin_loop();
    #[cfg(leasehold_loom)]
    loom::thread::yield_now();
}

/// Gives the processor to another thread.
#[inline(always)]
pub(crate) fn yield_now() {
    #[cfg(not(leasehold_loom))]
    std::thread::yield_now();
    #[cfg(leasehold_loom)]
    loom::thread::yield_now();
}
