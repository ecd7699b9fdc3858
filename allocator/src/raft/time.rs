//! The replicated timeline: how a leader chooses `leader_time_ns` for the commands it proposes.
//!
//! Every stamp is an earlier point of the timeline plus the time that has passed on this
//! process's monotonic clock since that point was reached here. Two points qualify:
//!
//! - the **applied anchor**: the time of the last command this node applied, paired with the
//!   monotonic reading taken when it was applied (which is never earlier than the moment the
//!   command was stamped, so projecting from it lags real time slightly); or, when it projects
//!   further, the **received anchor**: the time of a command this node appended to its log,
//!   paired with the reading taken when it was appended. A follower appends a command about a
//!   replication delay after it was stamped, but applies it only once it learns the command is
//!   committed, which after a leader's crash is when the next leader commits it, an election
//!   later; projecting from the applied anchor alone would lose that election from the
//!   timeline for good. A received command may still be truncated, but its stamp was a point
//!   of the timeline no later than real time when it was made, so projecting from it cannot
//!   run ahead of real time either;
//! - the **stamp anchor**: this leader's own previous stamp in the current term, paired with the
//!   monotonic reading taken when it was made (exact, so a steady leader's timeline keeps pace
//!   with real time instead of losing one commit latency per command).
//!
//! The stamp is the larger projection. Neither projection can run ahead of real time, so the
//! timeline never advances faster than real time between any two commands, whatever the wall
//! clocks of the nodes do. The stamp anchor is dropped when the term changes: an anchor from an
//! earlier tenure may be ahead of what the leaders in between applied, and continuing from it
//! could make the timeline jump. Only a node that has never applied a command (the log holds
//! none) has no anchor at all; it starts the timeline from the wall clock.
//!
//! Pure logic: every reading is passed in, nothing here reads a clock.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A point of the replicated timeline and the local monotonic reading taken when it was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// The replicated time, in nanoseconds.
    pub timeline_ns: u64,
    /// The local monotonic clock at that point, in nanoseconds.
    pub mono_ns: u64,
}

impl Anchor {
    /// The timeline at local monotonic reading `mono_now_ns`, assuming it advanced exactly as
    /// fast as the monotonic clock since the anchor.
    pub fn project(&self, mono_now_ns: u64) -> u64 {
        self.timeline_ns
            .saturating_add(mono_now_ns.saturating_sub(self.mono_ns))
    }
}

/// Chooses the time stamped into each proposed command.
#[derive(Debug, Default, Clone)]
pub struct LeaderClock {
    /// Term of `last`; a stamp anchor is only trusted within the term that made it.
    term: u64,
    last: Option<Anchor>,
}

impl LeaderClock {
    /// The time for a command proposed in `term` at monotonic reading `mono_now_ns`.
    ///
    /// `applied` is this node's applied anchor. `wall_unix_ns` is used only when there is no
    /// anchor at all; the caller must first make sure every committed command has been applied,
    /// so that "no anchor" really means "no command was ever applied".
    pub fn stamp(
        &mut self,
        term: u64,
        applied: Option<Anchor>,
        mono_now_ns: u64,
        wall_unix_ns: u64,
    ) -> u64 {
        if term != self.term {
            self.term = term;
            self.last = None;
        }
        let from_applied = applied.map(|a| a.project(mono_now_ns));
        let from_stamp = self.last.map(|a| a.project(mono_now_ns));
        let stamp = match (from_applied, from_stamp) {
            (Some(a), Some(s)) => a.max(s),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => wall_unix_ns,
        };
        self.last = Some(Anchor {
            timeline_ns: stamp,
            mono_ns: mono_now_ns,
        });
        stamp
    }
}

/// Of two anchors, the one projecting further (they advance alike from their readings).
pub fn furthest(a: Option<Anchor>, b: Option<Anchor>) -> Option<Anchor> {
    let lead = |x: &Anchor| i128::from(x.timeline_ns) - i128::from(x.mono_ns);
    match (a, b) {
        (Some(a), Some(b)) => Some(if lead(&b) > lead(&a) { b } else { a }),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The applied (or received) anchor of one node, written by the state machine (or the log
/// store) and read by the proposer.
#[derive(Debug, Default)]
pub struct AppliedTime {
    anchor: Mutex<Option<Anchor>>,
}

impl AppliedTime {
    /// Records that the timeline reached `timeline_ns` at monotonic reading `mono_ns`.
    pub fn record(&self, timeline_ns: u64, mono_ns: u64) {
        *self.lock() = Some(Anchor {
            timeline_ns,
            mono_ns,
        });
    }

    /// Records `timeline_ns` at `mono_ns` only if it projects further than the anchor held.
    pub fn record_furthest(&self, timeline_ns: u64, mono_ns: u64) {
        let mut held = self.lock();
        let offered = Some(Anchor {
            timeline_ns,
            mono_ns,
        });
        *held = furthest(*held, offered);
    }

    /// The last recorded anchor; `None` until a command is applied or a snapshot restored.
    pub fn anchor(&self) -> Option<Anchor> {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Anchor>> {
        // The guarded value is a plain `Copy` pair, consistent even after a panic elsewhere.
        self.anchor.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The clocks a node reads: its monotonic clock for measuring elapsed time, and the wall clock
/// only to start the timeline of a brand-new cluster.
pub trait TimeSource: Send + Sync + 'static {
    /// Monotonic reading in nanoseconds since an arbitrary origin; never decreases.
    fn mono_ns(&self) -> u64;
    /// Wall-clock time in nanoseconds since the UNIX epoch.
    fn wall_unix_ns(&self) -> u64;
}

/// The process's monotonic clock and the system wall clock.
#[derive(Debug, Clone)]
pub struct SystemTimeSource {
    origin: Instant,
}

impl SystemTimeSource {
    /// A source whose monotonic origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Shared handle, as nodes take it.
    pub fn shared() -> Arc<dyn TimeSource> {
        Arc::new(Self::new())
    }
}

impl Default for SystemTimeSource {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeSource for SystemTimeSource {
    fn mono_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn wall_unix_ns(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(timeline_ns: u64, mono_ns: u64) -> Option<Anchor> {
        Some(Anchor {
            timeline_ns,
            mono_ns,
        })
    }

    #[test]
    fn empty_log_starts_from_wall_clock_then_follows_monotonic_time() {
        let mut clock = LeaderClock::default();
        assert_eq!(clock.stamp(1, None, 100, 5_000), 5_000);
        // A wall clock jump forward is ignored once the timeline exists.
        assert_eq!(clock.stamp(1, None, 130, 999_999), 5_030);
    }

    #[test]
    fn continues_from_applied_time_without_jumping_to_wall_clock() {
        let mut clock = LeaderClock::default();
        let t = clock.stamp(2, anchor(1_000, 50), 80, u64::MAX);
        assert_eq!(t, 1_030);
    }

    #[test]
    fn steady_leader_does_not_lose_commit_latency() {
        let mut clock = LeaderClock::default();
        assert_eq!(clock.stamp(3, anchor(1_000, 0), 0, 0), 1_000);
        // Applied 40 ns after stamping; the next stamp 100 ns after the first is exact.
        assert_eq!(clock.stamp(3, anchor(1_000, 40), 100, 0), 1_100);
    }

    #[test]
    fn stamp_anchor_of_an_earlier_term_is_not_trusted() {
        let mut clock = LeaderClock::default();
        assert_eq!(clock.stamp(3, None, 0, 10_000), 10_000);
        // Another leader's (lagging) timeline was applied since; follow it, not the old stamp.
        assert_eq!(clock.stamp(5, anchor(9_000, 500), 600, 0), 9_100);
    }

    #[test]
    fn stamps_never_decrease_within_a_term() {
        let mut clock = LeaderClock::default();
        let a = clock.stamp(4, anchor(5_000, 0), 10, 0);
        // A stale applied anchor (e.g. restored from an old snapshot) cannot pull time back.
        let b = clock.stamp(4, anchor(1_000, 0), 20, 0);
        assert!(b >= a, "{b} < {a}");
        assert_eq!(b, 5_020);
    }

    #[test]
    fn a_new_leader_continues_from_what_it_received_not_only_from_what_it_applied() {
        // The old leader stamped 10_000 at mono 0 and crashed; this follower appended that
        // command at mono 5 but applies it only when it commits it itself, 1_200 later.
        let received = AppliedTime::default();
        received.record_furthest(10_000, 5);
        let applied = anchor(10_000, 1_205);
        let mut clock = LeaderClock::default();
        let from = furthest(applied, received.anchor());
        // 1_300 after the append: 1_295 of real time passed since the old stamp at least.
        assert_eq!(clock.stamp(7, from, 1_305, 0), 11_300);
        // Applied alone would have lost the election's 1_200 for good.
        assert_eq!(LeaderClock::default().stamp(7, applied, 1_305, 0), 10_100);
    }

    #[test]
    fn the_received_anchor_keeps_the_furthest_projection() {
        let received = AppliedTime::default();
        received.record_furthest(10_000, 100);
        // A later append of an older stamp (a truncated leader's) projects less: ignored.
        received.record_furthest(10_050, 500);
        assert_eq!(received.anchor(), anchor(10_000, 100));
        received.record_furthest(11_000, 600);
        assert_eq!(received.anchor(), anchor(11_000, 600));
    }
}
