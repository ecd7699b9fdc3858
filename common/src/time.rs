//! Time as an input.
//!
//! Decisions use [`Nanos`], a monotonic timestamp in nanoseconds since an arbitrary origin.
//! Raw readings pass through a [`ClockGuard`] (or its lock-free twin [`SharedClockGuard`])
//! that never lets time run backwards: a reading below the last one is clamped to the last
//! one and counted, so a clock step can neither mint credit nor reopen a window (P3).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A monotonic instant, in nanoseconds since the clock's origin.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);

    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds from `earlier` to `self`; zero when `earlier` is later.
    pub const fn saturating_since(self, earlier: Nanos) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    pub const fn saturating_add_ns(self, ns: u64) -> Nanos {
        Nanos(self.0.saturating_add(ns))
    }

    pub const fn saturating_sub_ns(self, ns: u64) -> Nanos {
        Nanos(self.0.saturating_sub(ns))
    }

    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
}

/// A source of raw time readings. Implementations may step backwards; callers that decide
/// anything pass readings through a [`ClockGuard`].
pub trait Clock: Send + Sync {
    fn now(&self) -> Nanos;
}

/// The process's monotonic clock, measured from the moment the value was created.
#[derive(Clone, Debug)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        SystemClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        let ns = self.origin.elapsed().as_nanos();
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// Tokio's clock, measured from the moment the value was created: virtual time under a
/// paused runtime (`tokio::time::pause`) or a network simulator that drives tokio's timers,
/// and the process's monotonic clock otherwise. [`SystemClock`] reads `std::time::Instant`,
/// which no runtime can control, so code that must run on simulated time takes this one.
#[cfg(feature = "tokio")]
#[derive(Clone, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// Starts at zero now. Must be called inside a tokio runtime when time is paused, so
    /// that the origin is on that runtime's timeline.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> Nanos {
        let ns = self.origin.elapsed().as_nanos();
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to; it may be set backwards to test rollback.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now_ns: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(start: Nanos) -> Self {
        ManualClock {
            now_ns: Arc::new(AtomicU64::new(start.0)),
        }
    }

    pub fn set(&self, t: Nanos) {
        self.now_ns.store(t.0, Ordering::SeqCst);
    }

    pub fn advance_ns(&self, ns: u64) {
        self.now_ns.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos(self.now_ns.load(Ordering::SeqCst))
    }
}

/// Counts of readings that tried to move time backwards.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackStats {
    /// Readings that were below the last accepted reading.
    pub rollbacks: u64,
    /// Sum of how far those readings were behind, in nanoseconds.
    pub rollback_ns: u64,
}

/// Turns raw readings into a never-decreasing timeline (single owner).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockGuard {
    last: Nanos,
    stats: RollbackStats,
}

impl ClockGuard {
    pub fn new(start: Nanos) -> Self {
        ClockGuard {
            last: start,
            stats: RollbackStats::default(),
        }
    }

    /// Accepts a raw reading and returns the guarded time: the reading itself, or the last
    /// accepted time if the reading is behind it (counted as a rollback).
    pub fn observe(&mut self, raw: Nanos) -> Nanos {
        if raw < self.last {
            self.stats.rollbacks += 1;
            self.stats.rollback_ns = self
                .stats
                .rollback_ns
                .saturating_add(self.last.saturating_since(raw));
            return self.last;
        }
        self.last = raw;
        raw
    }

    pub fn last(&self) -> Nanos {
        self.last
    }

    pub fn stats(&self) -> RollbackStats {
        self.stats
    }
}

/// A lock-free [`ClockGuard`] for hot paths shared between threads.
#[derive(Debug, Default)]
pub struct SharedClockGuard {
    last_ns: AtomicU64,
    rollbacks: AtomicU64,
    rollback_ns: AtomicU64,
}

impl SharedClockGuard {
    pub fn new(start: Nanos) -> Self {
        SharedClockGuard {
            last_ns: AtomicU64::new(start.0),
            ..Default::default()
        }
    }

    pub fn observe(&self, raw: Nanos) -> Nanos {
        let prev = self.last_ns.fetch_max(raw.0, Ordering::AcqRel);
        if raw.0 < prev {
            self.rollbacks.fetch_add(1, Ordering::Relaxed);
            self.rollback_ns.fetch_add(prev - raw.0, Ordering::Relaxed);
            return Nanos(prev);
        }
        raw
    }

    pub fn stats(&self) -> RollbackStats {
        RollbackStats {
            rollbacks: self.rollbacks.load(Ordering::Relaxed),
            rollback_ns: self.rollback_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_clamps_and_counts_rollback() {
        let mut g = ClockGuard::new(Nanos(100));
        assert_eq!(g.observe(Nanos(150)), Nanos(150));
        assert_eq!(g.observe(Nanos(120)), Nanos(150));
        assert_eq!(g.observe(Nanos(160)), Nanos(160));
        assert_eq!(
            g.stats(),
            RollbackStats {
                rollbacks: 1,
                rollback_ns: 30
            }
        );
    }

    #[test]
    fn shared_guard_matches_single_owner_guard() {
        let shared = SharedClockGuard::new(Nanos(0));
        let mut single = ClockGuard::new(Nanos(0));
        for raw in [5u64, 3, 9, 9, 1, 20, 19] {
            assert_eq!(shared.observe(Nanos(raw)), single.observe(Nanos(raw)));
        }
        assert_eq!(shared.stats(), single.stats());
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn tokio_clock_follows_paused_time() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let c = TokioClock::new();
            assert_eq!(c.now(), Nanos::ZERO);
            tokio::time::advance(std::time::Duration::from_millis(1_500)).await;
            assert_eq!(c.now(), Nanos::from_millis(1_500));
        });
    }

    #[test]
    fn manual_clock_moves_both_ways() {
        let c = ManualClock::new(Nanos(10));
        c.advance_ns(5);
        assert_eq!(c.now(), Nanos(15));
        c.set(Nanos(3));
        assert_eq!(c.now(), Nanos(3));
    }
}

/// Wall-clock time as nanoseconds since the UNIX epoch. It can step in either direction;
/// pass its readings through a [`ClockGuard`] before deciding anything with them. Used
/// where a timeline must be comparable with calendar instants (a policy's `effective_at`).
#[derive(Clone, Copy, Debug, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now(&self) -> Nanos {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }
}
