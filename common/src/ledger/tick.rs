//! Time-driven work: writing off expired leases and dropping idle state.

use super::account::Supply;
use super::command::Outcome;
use super::{ClosedAs, Ledger, TOMBSTONE_TTL_MS};
use crate::time::Nanos;

/// Keys examined for idleness per tick, so a tick's cost stays bounded with many keys.
pub const EVICT_SCAN_MAX: usize = 256;

impl Ledger {
    pub(super) fn tick(&mut self, now: Nanos) -> Outcome {
        let (expired, stranded) = self.expire_due(now);
        self.scan_idle(now);
        self.drop_old_tombstones(now);
        Outcome::Ticked { expired, stranded }
    }

    /// Writes off every lease past its expiry plus grace: whatever its holder did not report
    /// counts as spent (stranded) and is never granted again.
    fn expire_due(&mut self, now: Nanos) -> (u64, u64) {
        self.write_off_due(now, now)
    }

    /// Writes off every outstanding lease at `now`, whatever its expiry, as if its holder
    /// had vanished: `(leases, units)` written off. State restored from a backup starts
    /// this way, because the holders of those leases may still spend them, and a restore
    /// must never grant their credit a second time.
    pub fn write_off_all(&mut self, now: Nanos) -> (u64, u64) {
        self.write_off_due(Nanos(u64::MAX), now)
    }

    fn write_off_due(&mut self, due_by: Nanos, now: Nanos) -> (u64, u64) {
        let (mut expired, mut stranded) = (0u64, 0u64);
        while let Some(id) = self.book.next_due(due_by) {
            let rec = self.book.get(id).expect("due lease is live");
            let (key, unspent) = (rec.lease.key.clone(), rec.unspent());
            let origin = super::holder_ops::origin_of(&rec.lease);
            if let Some(acct) = self.accounts.get_mut(&key) {
                acct.strand(unspent, origin, now);
            }
            let outcome = Outcome::Released {
                reclaimed: 0,
                stranded: unspent,
            };
            self.close(id, ClosedAs::Expired, 0, outcome, now);
            expired += 1;
            stranded += unspent;
        }
        (expired, stranded)
    }

    /// Looks at up to [`EVICT_SCAN_MAX`] keys after the cursor: drops holders idle for a
    /// lease ttl, writes off upstream credit past its deadline, and drops keys that hold
    /// nothing worth keeping (P4).
    fn scan_idle(&mut self, now: Nanos) {
        let start = self.evict_cursor.take().unwrap_or_default();
        let keys: Vec<String> = self
            .accounts
            .range(start..)
            .filter(|(k, _)| Some(k.as_str()) != self.evict_cursor.as_deref())
            .take(EVICT_SCAN_MAX)
            .map(|(k, _)| k.clone())
            .collect();
        self.evict_cursor = if keys.len() == EVICT_SCAN_MAX {
            keys.last().map(|k| format!("{k}\0"))
        } else {
            None
        };
        for key in keys {
            let ttl_ms = self
                .policies
                .get(&self.accounts[&key].policy_id)
                .map_or(0, |p| p.lease.ttl_ms);
            let idle_ns = ttl_ms.saturating_mul(1_000_000);
            let policy_gone = ttl_ms == 0;
            let acct = self.accounts.get_mut(&key).expect("listed above");
            acct.holders
                .retain(|_, s| s.current.is_some() || now.saturating_since(s.last_seen) < idle_ns);
            if let Supply::Upstream(u) = &mut acct.supply {
                if u.idle > 0 && now >= u.deadline {
                    acct.stats.lost_upstream += u.idle;
                    u.idle = 0;
                }
            }
            let droppable = acct.is_idle(now, idle_ns) || (policy_gone && acct.leases == 0);
            if droppable && acct.outstanding == 0 {
                self.accounts.remove(&key);
            }
        }
    }

    fn drop_old_tombstones(&mut self, now: Nanos) {
        let ttl_ns = TOMBSTONE_TTL_MS * 1_000_000;
        while let Some(&(at, id)) = self.tombstone_order.front() {
            if now.saturating_since(at) < ttl_ns {
                break;
            }
            self.tombstone_order.pop_front();
            self.tombstones.remove(&id);
        }
    }
}
