//! Where the engine's monotonic readings sit on the UNIX timeline.
//!
//! Fixed and sliding windows are aligned to multiples of their length since the UNIX epoch
//! (a per-day window resets at 00:00 UTC, a per-minute one on the minute), as
//! envoyproxy/ratelimit's windows are and as the allocators' are: so every agent of a
//! fleet and every restart of one agent agree on where a window starts. Decisions still
//! take monotonic readings, so the engine keeps the offset from its monotonic timeline to
//! UNIX time and re-reads the wall clock now and then ([`Engine::sync_unix_time`]); a
//! wall-clock step therefore moves windows at the next sync, never mid-decision, and a
//! step backwards never reopens a window (each window counter clamps its own time).

use super::Engine;
use leasehold_common::time::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};

/// A change of the offset smaller than this is not stored: the monotonic and the wall
/// clock tick at one rate, so only a real step of the wall clock is worth a write to a
/// field every decision with a window reads.
const OFFSET_STEP_MIN_NS: u64 = 1_000_000;

/// UNIX time at monotonic zero, in nanoseconds.
#[derive(Debug)]
pub(crate) struct UnixOffset(AtomicU64);

impl UnixOffset {
    /// The offset for a wall reading `wall` taken at monotonic `now`.
    pub(crate) fn new(wall: jiff::Timestamp, now: Nanos) -> Self {
        UnixOffset(AtomicU64::new(offset_ns(wall, now)))
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Re-reads the offset from `wall` taken at `now`; returns whether it moved.
    fn sync(&self, wall: jiff::Timestamp, now: Nanos) -> bool {
        let new = offset_ns(wall, now);
        if new.abs_diff(self.get()) < OFFSET_STEP_MIN_NS {
            return false;
        }
        self.0.store(new, Ordering::Relaxed);
        true
    }
}

/// `wall − now` in nanoseconds; 0 for a wall clock before 1970 (windows then start at
/// the monotonic origin rather than never).
fn offset_ns(wall: jiff::Timestamp, now: Nanos) -> u64 {
    let wall_ns = u64::try_from(wall.as_nanosecond()).unwrap_or(0);
    wall_ns.saturating_sub(now.0)
}

impl Engine {
    /// Re-reads the wall clock at monotonic `now` so that windows stay aligned to UNIX
    /// time after the wall clock is stepped (call it every second or so). Returns whether
    /// the offset moved.
    pub fn sync_unix_time(&self, now: Nanos) -> bool {
        let moved = self.unix_offset.sync((self.wall_clock)(), now);
        if moved {
            tracing::info!(
                unix_offset_ns = self.unix_offset.get(),
                "wall clock moved: windows follow it"
            );
        }
        moved
    }

    /// Monotonic `now` as UNIX time, the timeline windows are aligned on.
    pub fn unix_time(&self, now: Nanos) -> Nanos {
        now.saturating_add_ns(self.unix_offset.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_follows_steps_only() {
        let at = |s: i64| jiff::Timestamp::from_second(s).unwrap();
        let o = UnixOffset::new(at(1_000), Nanos::from_secs(10));
        assert_eq!(o.get(), 990_000_000_000);
        assert!(!o.sync(at(1_005), Nanos(15_000_500_000)), "half a ms");
        assert!(
            o.sync(at(1_005), Nanos::from_secs(16)),
            "a step of a second"
        );
        assert_eq!(o.get(), 989_000_000_000);
        assert!(o.sync(at(-5), Nanos(0)));
        assert_eq!(o.get(), 0, "before 1970");
    }
}
