//! Fixed-window counts out of the engine and back in: what a standalone agent keeps in its
//! state file so that a restart does not hand every user a fresh window.
//!
//! Only fixed windows (the algorithm of envoyproxy/ratelimit rules) are carried over; a
//! count is put back only into the same window of a rule with the same window length, so
//! a changed rule or an ended window starts afresh as it would have anyway.

use super::local::{LocalLimiter, LocalSpec};
use super::policy::Enforcement;
use super::spin::SpinLock;
use super::table::EntryState;
use super::Engine;
use leasehold_common::algo::FixedWindow;
use leasehold_common::time::Nanos;
use std::collections::HashMap;

/// Units counted in one key's current window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowCount {
    pub policy_id: String,
    /// The key as held in the key table.
    pub key: String,
    pub window_ns: u64,
    /// Which window: its start on the UNIX timeline over `window_ns`.
    pub index: u64,
    pub count: u64,
}

impl Engine {
    /// The counts of every fixed window still open at `now` whose key was used at or after
    /// `used_since` (all of them with [`Nanos::ZERO`]).
    pub fn window_counts(&self, used_since: Nanos, now: Nanos) -> Vec<WindowCount> {
        let unix = self.unix_time(now).0;
        let rules = self.rules.load();
        let ids: HashMap<u64, &str> = rules
            .policies
            .iter()
            .map(|p| (p.generation, &*p.id))
            .collect();
        let mut out = Vec::new();
        self.table.for_each(|entry| {
            let (EntryState::Local(limiter), Some(id)) = (&entry.state, ids.get(&entry.generation))
            else {
                return;
            };
            if entry.last_used() < used_since {
                return;
            }
            let window = match &*limiter.lock() {
                LocalLimiter::FixedWindow(w) | LocalLimiter::CountingWindow(w) => w.clone(),
                _ => return,
            };
            let (start, end) = window.window_bounds(window.last());
            if window.count() == 0 || end.0 <= unix {
                return;
            }
            out.push(WindowCount {
                policy_id: (*id).to_owned(),
                key: entry.key().to_owned(),
                window_ns: window.window_ns(),
                index: start.0 / window.window_ns(),
                count: window.count(),
            });
        });
        out
    }

    /// Puts `counts` back at `now`: each into its key's state if its policy is loaded with
    /// a fixed window of the same length and the window is still the current one. Keys
    /// already held keep their state. Returns how many counts were put back.
    pub fn restore_window_counts(
        &self,
        counts: impl IntoIterator<Item = WindowCount>,
        now: Nanos,
    ) -> usize {
        let now = self.counters.observe(now);
        let unix_offset_ns = self.unix_offset.get();
        let unix = now.saturating_add_ns(unix_offset_ns);
        let at = super::local::LocalTime::from_unix(now, unix_offset_ns);
        let rules = self.rules.load();
        let mut restored = 0;
        for c in counts {
            let Some(p) = rules.policy(&c.policy_id) else {
                continue;
            };
            let (limit, window_ns, counting) = match &p.enforcement {
                Enforcement::Local(LocalSpec::FixedWindow { limit, window_ns }) => {
                    (*limit, *window_ns, false)
                }
                Enforcement::Local(LocalSpec::CountingWindow { limit, window_ns }) => {
                    (*limit, *window_ns, true)
                }
                _ => continue,
            };
            if window_ns != c.window_ns || unix.0 / window_ns != c.index {
                continue;
            }
            let Ok(window) = FixedWindow::with_count(limit, window_ns, unix, c.count) else {
                continue;
            };
            let limiter = if counting {
                LocalLimiter::CountingWindow(window)
            } else {
                LocalLimiter::FixedWindow(window)
            };
            let hash = self.table.hash(&c.key);
            let made = self
                .table
                .get_or_insert(&c.key, hash, p.generation, at, |_| {
                    EntryState::Local(SpinLock::new(limiter))
                });
            if matches!(made, Ok((_, true))) {
                restored += 1;
            }
        }
        restored
    }
}
