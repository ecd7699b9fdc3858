//! Per-thread state for the hot path: counters and clock readings that every decision
//! writes live in one cache line per thread, summed (or combined) when read.
//!
//! Atomics shared by all threads make every decision move the same cache line between
//! cores; with one stripe per thread each core writes only its own line. A thread picks its
//! stripe once (a process-wide round robin), so the threads of a pool land on distinct
//! stripes until there are more threads than stripes; stripes are still atomics, so
//! threads that share one stay correct, only slower.

use leasehold_common::time::{Nanos, RollbackStats};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Most stripes one striped value has; more threads share stripes.
pub(crate) const STRIPES_MAX: usize = 64;

/// Aligned to two cache lines: adjacent-line prefetchers pull pairs of lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's index, assigned on first use.
#[inline]
pub(crate) fn thread_index() -> usize {
    THREAD_INDEX.with(|i| {
        let v = i.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
        i.set(v);
        v
    })
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

/// One value per stripe.
#[derive(Debug)]
pub(crate) struct Striped<T> {
    stripes: Box<[Padded<T>]>,
    mask: usize,
}

impl<T: Default> Striped<T> {
    /// `count` stripes (a power of two, at least 1).
    pub(crate) fn new(count: usize) -> Self {
        let count = count.clamp(1, STRIPES_MAX).next_power_of_two();
        Striped {
            stripes: (0..count).map(|_| Padded::default()).collect(),
            mask: count - 1,
        }
    }
}

impl<T> Striped<T> {
    /// This thread's stripe.
    #[inline]
    pub(crate) fn local(&self) -> &T {
        &self.stripes[thread_index() & self.mask].0
    }

    /// This thread's stripe and its number.
    #[inline]
    pub(crate) fn local_indexed(&self) -> (usize, &T) {
        let i = thread_index() & self.mask;
        (i, &self.stripes[i].0)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|p| &p.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.stripes.len()
    }
}

/// Relaxed sum of one counter over every stripe.
pub(crate) fn sum<T>(striped: &Striped<T>, field: impl Fn(&T) -> &AtomicU64) -> u64 {
    striped
        .iter()
        .map(|s| field(s).load(Ordering::Relaxed))
        .fold(0u64, u64::wrapping_add)
}

/// Adds to a counter that only this thread's stripe holds (relaxed: counters order
/// nothing).
#[inline]
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A monotonic guard per stripe: a reading below the stripe's last one is clamped to it and
/// counted (P3). The stripe's line is written only when time moved forward.
///
/// Each thread's readings never step back, and a clock step back is clamped by every
/// thread that sees it. Readings of different threads are not ordered against each other:
/// that ordering would need one shared line written by every decision, and each key's
/// algorithm already treats a reading behind its own last one as no elapsed time.
#[derive(Debug, Default)]
pub(crate) struct ClockStripe {
    last_ns: AtomicU64,
    rollbacks: AtomicU64,
    rollback_ns: AtomicU64,
}

impl ClockStripe {
    #[inline]
    pub(crate) fn observe(&self, raw: Nanos, start: Nanos) -> Nanos {
        let last = self.last_ns.load(Ordering::Relaxed).max(start.0);
        if raw.0 > last {
            // fetch_max: a thread sharing this stripe may have moved it meanwhile.
            let prev = self.last_ns.fetch_max(raw.0, Ordering::Relaxed);
            if prev > raw.0 {
                return self.clamped(raw, prev);
            }
            return raw;
        }
        if raw.0 == last {
            return raw;
        }
        self.clamped(raw, last)
    }

    #[cold]
    fn clamped(&self, raw: Nanos, to: u64) -> Nanos {
        add(&self.rollbacks, 1);
        add(&self.rollback_ns, to - raw.0);
        Nanos(to)
    }
}

/// The engine's clock guard: one [`ClockStripe`] per stripe, starting at `start`.
#[derive(Debug)]
pub(crate) struct StripedClock {
    start: Nanos,
    stripes: Striped<ClockStripe>,
}

impl StripedClock {
    pub(crate) fn new(start: Nanos, stripes: usize) -> Self {
        StripedClock {
            start,
            stripes: Striped::new(stripes),
        }
    }

    #[inline]
    pub(crate) fn observe(&self, raw: Nanos) -> Nanos {
        self.stripes.local().observe(raw, self.start)
    }

    pub(crate) fn stats(&self) -> RollbackStats {
        RollbackStats {
            rollbacks: sum(&self.stripes, |s| &s.rollbacks),
            rollback_ns: sum(&self.stripes, |s| &s.rollback_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_common::time::ClockGuard;

    #[test]
    fn one_thread_matches_the_single_owner_guard() {
        let striped = StripedClock::new(Nanos(2), 4);
        let mut single = ClockGuard::new(Nanos(2));
        for raw in [5u64, 3, 9, 9, 1, 20, 19, 0, 21] {
            assert_eq!(striped.observe(Nanos(raw)), single.observe(Nanos(raw)));
        }
        assert_eq!(striped.stats(), single.stats());
    }

    #[test]
    fn each_thread_is_monotonic_and_rollbacks_sum() {
        let clock = StripedClock::new(Nanos(0), 2);
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let clock = &clock;
                s.spawn(move || {
                    let mut last = 0;
                    for i in 0..2_000u64 {
                        // Every tenth reading steps back by 5.
                        let raw = if i % 10 == 9 { i + t - 5 } else { i + t };
                        let seen = clock.observe(Nanos(raw)).0;
                        assert!(seen >= last, "time went back on one thread");
                        last = seen;
                    }
                });
            }
        });
        assert!(
            clock.stats().rollbacks >= 3 * 199,
            "each thread's steps back count"
        );
    }
}
