//! Every local limiter's state out of the engine and back in: what a standalone agent keeps
//! in its state file so that a restart hands no user a fresh window, period or bucket.
//!
//! What is taken and what is put back, per algorithm, is in [`saved`](super::saved).

use super::local::LocalTime;
use super::policy::Enforcement;
use super::saved::SavedLimiter;
use super::spin::SpinLock;
use super::table::EntryState;
use super::Engine;
use leasehold_common::time::Nanos;
use std::collections::HashMap;

impl Engine {
    /// The state of every local limiter that still has an effect at `now` and whose key
    /// was used at or after `used_since` (all of them with [`Nanos::ZERO`]).
    pub fn saved_limiters(&self, used_since: Nanos, now: Nanos) -> Vec<SavedLimiter> {
        let at = LocalTime::from_unix(now, self.unix_offset.get());
        let rules = self.rules.load();
        let ids: HashMap<u64, &str> = rules
            .policies
            .iter()
            .map(|p| (p.generation, &*p.id))
            .collect();
        let mut out = Vec::new();
        self.table.for_each(|entry| {
            let (EntryState::Local(limiter), Some(id)) =
                (&entry.state, ids.get(&entry.generation()))
            else {
                return;
            };
            if entry.last_used() < used_since {
                return;
            }
            let Some(state) = limiter.lock().saved(at) else {
                return;
            };
            out.push(SavedLimiter {
                policy_id: (*id).to_owned(),
                key: entry.key().to_owned(),
                state,
            });
        });
        out
    }

    /// Puts `saved` back at `now`, each into its key if its policy is loaded with the
    /// parameters the state was taken under and the state still has an effect. Keys
    /// already held keep their state, so of two states of one key the first given wins.
    /// Returns how many were put back.
    pub fn restore_limiters(
        &self,
        saved: impl IntoIterator<Item = SavedLimiter>,
        now: Nanos,
    ) -> usize {
        let now = self.counters.observe(now);
        let at = LocalTime::from_unix(now, self.unix_offset.get());
        let rules = self.rules.load();
        let mut restored = 0;
        for s in saved {
            let Some(p) = rules.policy(&s.policy_id) else {
                continue;
            };
            let Enforcement::Local(spec) = &p.enforcement else {
                continue;
            };
            let limiter = if p.max_delay_ns > 0 {
                s.state.restore_shaped(spec, at)
            } else {
                s.state.restore(spec, at)
            };
            let Some(limiter) = limiter else {
                continue;
            };
            let hash = self.table.hash(&s.key);
            let made = self
                .table
                .get_or_insert(&s.key, hash, p.generation, at, |_| {
                    EntryState::Local(SpinLock::new(limiter))
                });
            if matches!(made, Ok((_, true))) {
                restored += 1;
            }
        }
        restored
    }
}
