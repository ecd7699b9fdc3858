//! When a key's state may leave the key table: only once forgetting it changes no later
//! answer, or when the state is kept elsewhere.
//!
//! A dropped key starts again from a fresh state on its next use. For a limiter of this
//! process that fresh state must decide exactly as the old one would have, or a user who
//! spent a daily quota gets it back when the table is busy; so a local key goes only once
//! its window has ended or its bucket is full again. Leased credit is owned by the
//! allocator (dropping the key hands the lease back and the allocator keeps counting), and
//! a key decided per request holds nothing but a fallback bucket: those go once idle.

use super::local::{bucket_rest_at, LocalTime};
use super::table::{Entry, EntryState};
use leasehold_common::time::Nanos;
use std::sync::atomic::Ordering;

/// A key used within this long is kept even at rest (or `idle_ns`, if shorter): a thread
/// may be deciding on it from its cache this moment, and a charge landing on a dropped
/// entry would be lost.
pub(crate) const RECENT_NS_MAX: u64 = 1_000_000_000;

impl Entry {
    /// The first monotonic time from which the entry may be dropped if nothing uses it
    /// meanwhile; `at.mono` or earlier means now. Keys whose state lives elsewhere wait
    /// `idle_ns` after their last use, local ones until they are at rest.
    pub(crate) fn droppable_at(&self, at: LocalTime, idle_ns: u64) -> Nanos {
        let last_used = self.last_used();
        let recent = last_used.saturating_add_ns(idle_ns.min(RECENT_NS_MAX));
        let emergency = self
            .emergency
            .lock()
            .as_ref()
            .map_or(Nanos::ZERO, |b| bucket_rest_at(b));
        let state = match &self.state {
            EntryState::Leased { .. } | EntryState::Exact => last_used.saturating_add_ns(idle_ns),
            EntryState::Local(limiter) => limiter.lock().rest_at(at).max(recent),
            // Units still in flight must be released into this entry; when they are is
            // unknown, so the answer is "not yet".
            EntryState::InFlight { count, .. } => match count.load(Ordering::Acquire) {
                0 => recent,
                _ => at.mono.saturating_add_ns(1),
            },
        };
        state.max(emergency)
    }
}
