//! Booking holders' usage as the ledger accepts their reports, releases and write-offs.
//!
//! The ledger decides what a report means; this only looks at a lease before and after the
//! ledger applied a command, so the units booked are exactly the ones the ledger accepted:
//! the growth of the lease's `used`, the growth of the holder's own counts on an accepted
//! report, and the unreported credit of a lease written off.

use super::{AllocatorState, StateOutput};
use leasehold_common::ledger::{
    Acquire, Command, Decide, HolderCounts, LeaseRecord, Outcome, Refund, Release, Report,
    UsageBook, UsageCounts, UsageSubject,
};
use leasehold_common::time::Nanos;

fn subject(rec: &LeaseRecord) -> UsageSubject {
    UsageSubject {
        policy_id: rec.lease.policy_id.clone(),
        key: rec.lease.key.clone(),
        holder_id: rec.lease.holder_id.clone(),
    }
}

impl AllocatorState {
    pub fn usage(&self) -> &UsageBook {
        &self.usage
    }

    /// A holder's report, with the would-deny count of a shadow-mode policy and the
    /// holder's own counts, all cumulative over the lease.
    pub(super) fn apply_report(
        &mut self,
        now: Nanos,
        report: Report,
        would_deny: u64,
        counts: HolderCounts,
    ) -> StateOutput {
        let lease_id = report.lease_id;
        let before = self.ledger.lease(lease_id).map(|r| (subject(r), r.used));
        let out = self.ledger.apply(now, Command::Report(report));
        // Counted only once the report itself is accepted: a refused report (an ended
        // lease, a stranger's lease) tells nothing about the policy.
        if out.is_ok() && would_deny > 0 {
            self.shadow
                .record(&self.ledger, lease_id, would_deny, now.0);
        }
        if let Some((who, used_before)) = before {
            // The ledger may book usage and then refuse the renewal: what it booked counts.
            let used_after = self.ledger.lease(lease_id).map_or(used_before, |r| r.used);
            let mut booked = UsageCounts {
                admitted: used_after.saturating_sub(used_before),
                ..UsageCounts::default()
            };
            if out.is_ok() {
                let ledger = &self.ledger;
                let grown = self
                    .usage
                    .holder_growth(lease_id, counts, |id| ledger.lease(id).is_some());
                add_holder(&mut booked, &grown);
            }
            self.usage.record(self.ledger.now(), &who, &booked);
        }
        StateOutput::Ledger(out)
    }

    /// A holder's release with its final usage and counts.
    pub(super) fn apply_release(
        &mut self,
        now: Nanos,
        release: Release,
        counts: HolderCounts,
    ) -> StateOutput {
        let lease_id = release.lease_id;
        let final_used = release.final_used;
        let before = self.ledger.lease(lease_id).map(|r| (subject(r), r.used));
        let out = self.ledger.apply(now, Command::Release(release));
        // A retried release finds the lease already gone and is answered from memory.
        if let (Some((who, used_before)), Ok(Outcome::Released { .. })) = (before, &out) {
            let mut booked = UsageCounts {
                admitted: final_used.saturating_sub(used_before),
                ..UsageCounts::default()
            };
            let grown = self.usage.holder_growth(lease_id, counts, |_| true);
            add_holder(&mut booked, &grown);
            self.usage.forget_lease(lease_id);
            self.usage.record(self.ledger.now(), &who, &booked);
        }
        StateOutput::Ledger(out)
    }

    /// The ledger's tick, booking the unreported credit of every lease it writes off as
    /// stranded, and dropping usage past its retention.
    pub(super) fn ledger_tick(&mut self, now: Nanos) -> StateOutput {
        let due: Vec<(u64, UsageSubject, u64)> = self
            .ledger
            .leases_due(now)
            .map(|r| (r.lease.lease_id, subject(r), r.unspent()))
            .collect();
        let out = self.ledger.apply(now, Command::Tick);
        self.book_written_off(due);
        self.usage.prune(self.ledger.now());
        StateOutput::Ledger(out)
    }

    /// A holder's acquire with the counts it made while it held no lease of the key. They
    /// are booked once: a retry of an answered request is answered from memory and adds
    /// nothing.
    pub(super) fn apply_acquire(
        &mut self,
        now: Nanos,
        acquire: Acquire,
        counts: HolderCounts,
    ) -> StateOutput {
        let who = UsageSubject {
            policy_id: acquire.policy_id.clone(),
            key: acquire.key.clone(),
            holder_id: acquire.holder_id.clone(),
        };
        let request_id = acquire.request_id;
        let answered_before = self
            .ledger
            .account(&acquire.key)
            .and_then(|a| a.holders.get(&acquire.holder_id))
            .filter(|slot| slot.last_outcome.is_some())
            .map(|slot| slot.last_request_id);
        let out = self.ledger.apply(now, Command::Acquire(acquire));
        let fresh = answered_before.is_none_or(|last| request_id > last);
        if fresh && out.is_ok() {
            let mut booked = UsageCounts::default();
            add_holder(&mut booked, &counts);
            self.usage.record(self.ledger.now(), &who, &booked);
        }
        StateOutput::Ledger(out)
    }

    /// A decision of exact policies: each item's units admitted, or refused where the item
    /// did not fit. Decisions name no holder, so their rows have none.
    pub(super) fn apply_decide(&mut self, now: Nanos, d: Decide) -> StateOutput {
        let items: Vec<(UsageSubject, u64)> = d.items.iter().map(exact_item).collect();
        let out = self.ledger.apply(now, Command::Decide(d));
        if let Ok(Outcome::Decided(decided)) = &out {
            for ((who, units), verdict) in items.iter().zip(&decided.verdicts) {
                let booked = match (decided.admitted, verdict.fits) {
                    (true, _) => UsageCounts {
                        admitted: *units,
                        ..UsageCounts::default()
                    },
                    (false, false) => UsageCounts {
                        refused: *units,
                        ..UsageCounts::default()
                    },
                    (false, true) => continue,
                };
                self.usage.record(decided.at, who, &booked);
            }
        }
        StateOutput::Ledger(out)
    }

    /// A refund of an admitted decision: the units the ledger gave back leave the admitted
    /// figures of the decision's hour, item by item.
    pub(super) fn apply_refund(&mut self, now: Nanos, r: Refund) -> StateOutput {
        let items: Vec<(UsageSubject, u64)> = r.items.iter().map(exact_item).collect();
        let decided_at = r.decided_at;
        let out = self.ledger.apply(now, Command::Refund(r));
        if let Ok(Outcome::Refunded { units }) = &out {
            let mut left = *units;
            for (who, units) in &items {
                left -= self.usage.take_back(decided_at, who, left.min(*units));
            }
        }
        StateOutput::Ledger(out)
    }

    /// Every live lease, as a restore writes them all off.
    pub(super) fn leases_outstanding(&self) -> Vec<(u64, UsageSubject, u64)> {
        self.ledger
            .leases()
            .map(|r| (r.lease.lease_id, subject(r), r.unspent()))
            .collect()
    }

    /// Books `(lease, subject, unspent)` of leases the ledger no longer holds as stranded.
    pub(super) fn book_written_off(&mut self, leases: Vec<(u64, UsageSubject, u64)>) {
        let at = self.ledger.now();
        for (lease_id, who, unspent) in leases {
            if self.ledger.lease(lease_id).is_some() {
                continue;
            }
            self.usage.forget_lease(lease_id);
            let booked = UsageCounts {
                stranded: unspent,
                ..UsageCounts::default()
            };
            self.usage.record(at, &who, &booked);
        }
    }
}

fn exact_item(i: &leasehold_common::ledger::DecideItem) -> (UsageSubject, u64) {
    let who = UsageSubject {
        policy_id: i.policy_id.clone(),
        key: i.key.clone(),
        holder_id: String::new(),
    };
    (who, i.units)
}

fn add_holder(c: &mut UsageCounts, h: &HolderCounts) {
    c.refused = c.refused.saturating_add(h.refused);
    c.shaped = c.shaped.saturating_add(h.shaped);
    c.fail_open = c.fail_open.saturating_add(h.fail_open);
}

#[cfg(test)]
mod tests;
