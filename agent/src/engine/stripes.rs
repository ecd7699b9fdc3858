//! Per-thread state for the hot path: counters and clock readings that every decision
//! writes live in one cache line per thread, summed (or combined) when read.
//!
//! Atomics shared by all threads make every decision move the same cache line between
//! cores; with one stripe per thread each core writes only its own line. A thread takes a
//! *slot* on first use: one of [`SLOTS_MAX`] exclusive slots while one is free (given back
//! when the thread exits), else the shared slot. Values striped per slot
//! ([`PerSlot`]) let a thread that owns its slot update them with plain loads and
//! stores, which cost no more than ordinary memory writes; the shared slot uses
//! read-modify-write atomics. Values striped by the machine's parallelism
//! ([`Striped::new`]) map slots onto fewer stripes and always use atomics; values there are
//! many of ([`Striped::owned_first`]) give only the first few slots a stripe of their own.

use leasehold_common::time::Nanos;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Exclusive slots; threads beyond these share one more.
pub(crate) const SLOTS_MAX: usize = 64;
/// The shared slot's index.
const SHARED: usize = SLOTS_MAX;
/// Most stripes a parallelism-sized striped value has.
pub(crate) const STRIPES_MAX: usize = SLOTS_MAX;

/// Aligned to two cache lines: adjacent-line prefetchers pull pairs of lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// Bit `i` set: slot `i` belongs to a live thread.
static TAKEN: AtomicU64 = AtomicU64::new(0);
const UNSET: usize = usize::MAX;

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(UNSET) };
    static RELEASE: SlotRelease = const { SlotRelease(Cell::new(UNSET)) };
}

/// Gives the thread's exclusive slot back when the thread exits.
struct SlotRelease(Cell<usize>);

impl Drop for SlotRelease {
    fn drop(&mut self) {
        let slot = self.0.get();
        // Anything this thread still decides while exiting goes through the shared slot.
        let _ = SLOT.try_with(|s| s.set(SHARED));
        if slot < SLOTS_MAX {
            // Release: the next owner's plain reads see this thread's last writes.
            TAKEN.fetch_and(!(1u64 << slot), Ordering::Release);
        }
    }
}

#[cold]
fn take_slot() -> usize {
    let mut cur = TAKEN.load(Ordering::Acquire);
    let slot = loop {
        let free = (!cur).trailing_zeros() as usize;
        if free >= SLOTS_MAX {
            break SHARED;
        }
        match TAKEN.compare_exchange_weak(
            cur,
            cur | (1u64 << free),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => break free,
            Err(actual) => cur = actual,
        }
    };
    // Registering the release fails only while the thread exits: stay shared then.
    let registered = RELEASE.try_with(|r| r.0.set(slot)).is_ok();
    let slot = if registered { slot } else { SHARED };
    SLOT.with(|s| s.set(slot));
    slot
}

/// This thread's slot: `< SLOTS_MAX` owned alone, `SLOTS_MAX` shared.
#[inline]
pub(crate) fn thread_slot() -> usize {
    let slot = SLOT.try_with(Cell::get).unwrap_or(SHARED);
    if slot == UNSET {
        take_slot()
    } else {
        slot
    }
}

/// The calling thread's slot, read once for everything one decision writes (each
/// reading costs a thread-local access).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Slot(usize);

impl Slot {
    #[inline]
    pub(crate) fn current() -> Slot {
        Slot(thread_slot())
    }
}

/// Stripes to use: the machine's parallelism rounded up to a power of two, at most
/// [`STRIPES_MAX`].
pub(crate) fn stripe_count() -> usize {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .next_power_of_two()
            .min(STRIPES_MAX)
    })
}

/// One value per stripe: the first `owned` slots have a stripe each, written with plain
/// stores by the thread owning the slot; every other thread shares the stripes after those,
/// by `slot & mask`, with atomic updates.
#[derive(Debug)]
pub(crate) struct Striped<T> {
    stripes: Box<[Padded<T>]>,
    owned: usize,
    mask: usize,
}

/// A thread's stripe of a striped value, and whether the thread alone writes it.
pub(crate) struct Local<'a, T> {
    pub(crate) value: &'a T,
    pub(crate) exclusive: bool,
}

// By hand: derived, they would ask `T` to be `Copy` as well.
impl<T> Clone for Local<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Local<'_, T> {}

impl<T: Default> Striped<T> {
    /// `count` stripes (rounded up to a power of two, 1 to [`STRIPES_MAX`]) shared by
    /// every thread whose slot maps onto them.
    pub(crate) fn new(count: usize) -> Self {
        Self::owned_first(0, count)
    }

    /// A stripe of its own for each of the first `owned` slots (written with plain stores
    /// by the thread owning the slot), and `shared` stripes (rounded up to a power of
    /// two) for the other threads. Sized by the machine rather than by [`SLOTS_MAX`], for
    /// values there are many of (one per policy).
    pub(crate) fn owned_first(owned: usize, shared: usize) -> Self {
        let owned = owned.min(SLOTS_MAX);
        let shared = shared.clamp(1, STRIPES_MAX).next_power_of_two();
        Striped {
            stripes: (0..owned + shared).map(|_| Padded::default()).collect(),
            owned,
            mask: shared - 1,
        }
    }
}

/// One stripe per slot, the exclusive ones written with plain stores, the shared slot's
/// with atomics: found from the slot alone, with no layout to read first.
#[derive(Debug)]
pub(crate) struct PerSlot<T>(Box<[Padded<T>; SLOTS_MAX + 1]>);

impl<T> PerSlot<T> {
    /// Each stripe made by `make`.
    pub(crate) fn from_fn(make: impl Fn() -> T) -> Self {
        let stripes: Box<[Padded<T>]> = (0..=SLOTS_MAX).map(|_| Padded(make())).collect();
        match stripes.try_into() {
            Ok(stripes) => PerSlot(stripes),
            Err(_) => unreachable!("made with SLOTS_MAX + 1 stripes"),
        }
    }

    /// The stripe of `slot`, taken by this thread.
    #[inline]
    pub(crate) fn at(&self, Slot(slot): Slot) -> Local<'_, T> {
        Local {
            value: &self.0[slot.min(SHARED)].0,
            exclusive: slot < SHARED,
        }
    }

    #[inline]
    pub(crate) fn local_slot(&self) -> Local<'_, T> {
        self.at(Slot::current())
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|p| &p.0)
    }
}

impl<T> Striped<T> {
    /// This thread's stripe.
    #[inline]
    pub(crate) fn local(&self) -> &T {
        self.local_slot().value
    }

    /// This thread's stripe and whether this thread alone writes it.
    #[inline]
    pub(crate) fn local_slot(&self) -> Local<'_, T> {
        self.at(Slot::current())
    }

    /// The stripe of `slot`, taken by this thread.
    #[inline]
    pub(crate) fn at(&self, Slot(slot): Slot) -> Local<'_, T> {
        let (index, exclusive) = if slot < self.owned {
            (slot, true)
        } else {
            (self.owned + (slot & self.mask), false)
        };
        Local {
            value: &self.stripes[index].0,
            exclusive,
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|p| &p.0)
    }
}

/// Relaxed sum of one counter over every stripe.
pub(crate) fn sum<T>(striped: &Striped<T>, field: impl Fn(&T) -> &AtomicU64) -> u64 {
    sum_of(striped.iter(), field)
}

/// [`sum`] over stripes given one by one.
pub(crate) fn sum_of<'a, T: 'a>(
    stripes: impl Iterator<Item = &'a T>,
    field: impl Fn(&T) -> &AtomicU64,
) -> u64 {
    stripes
        .map(|s| field(s).load(Ordering::Relaxed))
        .fold(0u64, u64::wrapping_add)
}

/// Adds to a counter of this thread's stripe (relaxed: counters order nothing). Returns
/// the value before.
#[inline]
pub(crate) fn add(counter: &AtomicU64, n: u64, exclusive: bool) -> u64 {
    if exclusive {
        // Only this thread writes the stripe: a plain store loses nothing.
        let before = counter.load(Ordering::Relaxed);
        counter.store(before.wrapping_add(n), Ordering::Relaxed);
        before
    } else {
        counter.fetch_add(n, Ordering::Relaxed)
    }
}

/// A monotonic guard per stripe: a reading below the stripe's last one is clamped to it and
/// counted (P3). The stripe's line is written only when time moved forward.
///
/// Each thread's readings never step back, and a clock step back is clamped by every
/// thread that sees it. Readings of different threads are not ordered against each other:
/// that ordering would need one shared line written by every decision, and each key's
/// algorithm already treats a reading behind its own last one as no elapsed time.
#[derive(Debug)]
pub(crate) struct ClockStripe {
    last_ns: AtomicU64,
    pub(crate) rollbacks: AtomicU64,
    pub(crate) rollback_ns: AtomicU64,
}

impl ClockStripe {
    /// A stripe no reading has passed yet: readings before `start` are clamped to it.
    pub(crate) fn starting_at(start: Nanos) -> Self {
        ClockStripe {
            last_ns: AtomicU64::new(start.0),
            rollbacks: AtomicU64::new(0),
            rollback_ns: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn observe(&self, raw: Nanos, exclusive: bool) -> Nanos {
        let last = self.last_ns.load(Ordering::Relaxed);
        if raw.0 > last {
            if exclusive {
                self.last_ns.store(raw.0, Ordering::Relaxed);
                return raw;
            }
            // A thread sharing this stripe may have moved it meanwhile.
            let prev = self.last_ns.fetch_max(raw.0, Ordering::Relaxed);
            if prev > raw.0 {
                return self.clamped(raw, prev, exclusive);
            }
            return raw;
        }
        if raw.0 == last {
            return raw;
        }
        self.clamped(raw, last, exclusive)
    }

    #[cold]
    fn clamped(&self, raw: Nanos, to: u64, exclusive: bool) -> Nanos {
        add(&self.rollbacks, 1, exclusive);
        add(&self.rollback_ns, to - raw.0, exclusive);
        Nanos(to)
    }
}
