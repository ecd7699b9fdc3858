//! Commands from holders: acquire, report, release; and an operator's revoke.

use super::account::{HolderSlot, Origin};
use super::book::{LeaseRecord, LeaseState};
use super::command::{Acquire, Grant, Outcome, Release, Report};
use super::error::LedgerError;
use super::grant::{lease_ttl_ms, slot_for};
use super::sizing::{size_grant, Ask};
use super::{ClosedAs, Ledger, Supply, Tombstone};
use crate::lease::LeaseId;
use crate::time::Nanos;

impl Ledger {
    pub(super) fn acquire(&mut self, a: Acquire, now: Nanos) -> Result<Outcome, LedgerError> {
        self.check_holder_id(&a.holder_id)?;
        if self.policies.get(&a.policy_id).is_some_and(|p| p.exact) {
            return Err(LedgerError::ExactPolicy(a.policy_id));
        }
        let leases_max = self.config.limits.leases_max;
        let holders_max = self.config.limits.holders_per_key_max;
        let (previous, params) = {
            let (acct, params) = self.account_for(&a.policy_id, &a.key, now)?;
            let slot = slot_for(acct, &a.holder_id, now, holders_max, params.lease.ttl_ms)?;
            if let Some(cached) = replay(slot, a.request_id)? {
                return Ok(cached);
            }
            slot.demand_milli_per_sec = a.demand_milli_per_sec;
            slot.priority = a.priority;
            slot.last_seen = now;
            (slot.current.take(), params)
        };
        if let Some(prev) = previous {
            self.book.update(prev, |r| {
                if r.state == LeaseState::Active {
                    r.state = LeaseState::Closing;
                }
            });
        }
        let outcome = self.grant_new(
            &a.key,
            &a.holder_id,
            a.want_credit,
            a.priority,
            &params,
            now,
            leases_max,
        )?;
        self.remember(&a.key, &a.holder_id, a.request_id, &outcome);
        Ok(outcome)
    }

    pub(super) fn report(&mut self, r: Report, now: Nanos) -> Result<Outcome, LedgerError> {
        let rec = self.live_record(r.lease_id, &r.holder_id, "reported on")?;
        let key = rec.lease.key.clone();
        let usage = Usage {
            used: rec.used,
            returned: rec.returned,
            granted: rec.lease.credit + rec.returned,
        };
        let policy_id = rec.lease.policy_id.clone();
        {
            let holders_max = self.config.limits.holders_per_key_max;
            let ttl_ms = self.policies.get(&policy_id).map_or(0, |p| p.lease.ttl_ms);
            let acct = self
                .accounts
                .get_mut(&key)
                .expect("live lease has an account");
            // The slot may have been dropped while only a superseded lease was left.
            let slot = slot_for(acct, &r.holder_id, now, holders_max, ttl_ms)?;
            if let Some(cached) = replay(slot, r.request_id)? {
                return Ok(cached);
            }
            slot.demand_milli_per_sec = r.demand_milli_per_sec;
            slot.priority = r.priority;
            slot.last_seen = now;
        }
        usage.check(r.lease_id, r.used, r.return_credit)?;
        self.settle(r.lease_id, r.used, r.return_credit - usage.returned, now);
        let outcome = self.renew(&key, &r, now)?;
        self.remember(&key, &r.holder_id, r.request_id, &outcome);
        Ok(outcome)
    }

    pub(super) fn release(&mut self, r: Release, now: Nanos) -> Result<Outcome, LedgerError> {
        if let Some(t) = self.tombstones.get(&r.lease_id) {
            if t.holder_id == r.holder_id && t.request_id == r.request_id {
                return Ok(t.outcome.clone());
            }
        }
        let rec = self.live_record(r.lease_id, &r.holder_id, "released")?;
        let usage = Usage {
            used: rec.used,
            returned: rec.returned,
            granted: rec.lease.credit + rec.returned,
        };
        usage.check(r.lease_id, r.final_used, rec.returned)?;
        let unused = rec.lease.credit - r.final_used;
        self.settle(r.lease_id, r.final_used, unused, now);
        let outcome = Outcome::Released {
            reclaimed: unused,
            stranded: 0,
        };
        self.close(
            r.lease_id,
            ClosedAs::Released,
            r.request_id,
            outcome.clone(),
            now,
        );
        Ok(outcome)
    }

    pub(super) fn revoke(&mut self, lease_id: LeaseId) -> Result<Outcome, LedgerError> {
        self.book
            .update(lease_id, |r| r.state = LeaseState::Revoked)
            .ok_or(LedgerError::UnknownLease(lease_id))?;
        Ok(Outcome::Revoked { lease_id })
    }

    fn check_holder_id(&self, holder_id: &str) -> Result<(), LedgerError> {
        let max = self.config.limits.holder_id_len_max;
        if holder_id.is_empty() || holder_id.len() > max {
            return Err(LedgerError::InvalidHolder { max });
        }
        Ok(())
    }

    /// The live record of `lease_id` if `holder_id` holds it; a closed lease is refused by
    /// name so a late report cannot revive it.
    fn live_record(
        &self,
        lease_id: LeaseId,
        holder_id: &str,
        action: &'static str,
    ) -> Result<&LeaseRecord, LedgerError> {
        let Some(rec) = self.book.get(lease_id) else {
            return Err(match self.tombstones.get(&lease_id) {
                Some(t) => LedgerError::LeaseClosed {
                    lease_id,
                    state: match t.closed_as {
                        ClosedAs::Released => "released".into(),
                        ClosedAs::Expired => "expired".into(),
                    },
                    action: action.into(),
                },
                None => LedgerError::UnknownLease(lease_id),
            });
        };
        if rec.lease.holder_id != holder_id {
            return Err(LedgerError::NotHolder { lease_id });
        }
        Ok(rec)
    }

    /// Books reported usage and handed-back credit of a live lease.
    fn settle(&mut self, lease_id: LeaseId, used: u64, handed_back: u64, now: Nanos) {
        let (key, holder_id, delta, origin) = self
            .book
            .update(lease_id, |rec| {
                let delta = used - rec.used;
                rec.used = used;
                rec.lease.credit -= handed_back;
                rec.returned += handed_back;
                let l = &rec.lease;
                (l.key.clone(), l.holder_id.clone(), delta, origin_of(l))
            })
            .expect("settle on a live lease");
        let acct = self
            .accounts
            .get_mut(&key)
            .expect("live lease has an account");
        if let Some(slot) = acct.holders.get_mut(&holder_id) {
            slot.entitled.hand_back(handed_back);
        }
        acct.mark_used(delta, origin, now);
        acct.reclaim(handed_back, origin, now);
    }

    /// Renews an active lease after a report: more credit if the sizing allows, a new
    /// expiry, and a replacement lease if the policy version moved on.
    fn renew(&mut self, key: &str, r: &Report, now: Nanos) -> Result<Outcome, LedgerError> {
        let leases_max = self.config.limits.leases_max;
        let rec = self.book.get(r.lease_id).expect("renew on a live lease");
        let current = self.effective(&rec.lease.policy_id);
        let stale = current
            .as_ref()
            .is_none_or(|p| p.version != rec.lease.policy_version);
        // A sub-lease of an upstream lease that has since closed cannot be extended, nor
        // can a lease whose window has ended (its holder asks with a replacement).
        let issued_at = Nanos(rec.lease.issued_at_ns);
        let (orphaned, window_ended) = match self.accounts.get(key).map(|a| &a.supply) {
            Some(Supply::Upstream(u)) => (
                u.lease_id.is_none() || u.lease_id != rec.lease.parent_lease_id,
                false,
            ),
            Some(Supply::Window(w)) => (false, !w.holds(issued_at)),
            _ => (false, false),
        };
        let replace = stale || (window_ended && r.want_credit > 0);
        if rec.state != LeaseState::Active || stale || orphaned || window_ended {
            // Not renewed: same generation and issue time, so the holder keeps its deadline.
            self.book.update(r.lease_id, |rec| {
                if rec.state == LeaseState::Active {
                    rec.state = LeaseState::Closing;
                }
            });
            let lease = self.book.get(r.lease_id).expect("live").lease.clone();
            let replacement = match (&current, replace) {
                (Some(params), true) => self
                    .grant_replacement(key, r, params, now, leases_max)?
                    .map(Box::new),
                _ => None,
            };
            return Ok(Outcome::Granted(Box::new(Grant {
                lease,
                added: 0,
                replacement,
                retry_after_ns: 0,
            })));
        }
        let params = current.expect("checked above");
        let acct = self
            .accounts
            .get_mut(key)
            .expect("live lease has an account");
        let held = rec.unspent();
        let (added, retry_after_ns) = if r.want_credit == 0 {
            (0, 0)
        } else {
            let ask = Ask {
                holder_id: &r.holder_id,
                want: r.want_credit,
                priority: r.priority,
                held,
            };
            match size_grant(acct, &params, &ask, now) {
                Ok(units) => (units, 0),
                Err((_, retry_after_ns)) => (0, retry_after_ns),
            }
        };
        if added > 0 {
            acct.put_on_lease(added);
        }
        let ttl_ms = lease_ttl_ms(acct, &params, now);
        let epoch = self.epoch;
        let rec = self.book.get(r.lease_id).expect("live");
        let mut lease = rec.lease.clone();
        lease.credit += added;
        lease.generation += 1;
        lease.issued_at_ns = now.0;
        lease.ttl_ms = ttl_ms;
        lease.epoch = epoch;
        let write_off_at = self.write_off_at(&lease);
        self.book.update(r.lease_id, |rec| {
            rec.lease = lease.clone();
            rec.write_off_at = write_off_at;
        });
        Ok(Outcome::Granted(Box::new(Grant {
            lease,
            added,
            replacement: None,
            retry_after_ns,
        })))
    }

    fn remember(&mut self, key: &str, holder_id: &str, request_id: u64, outcome: &Outcome) {
        if let Some(slot) = self
            .accounts
            .get_mut(key)
            .and_then(|a| a.holders.get_mut(holder_id))
        {
            slot.last_request_id = request_id;
            slot.last_outcome = Some(outcome.clone());
        }
    }

    /// Removes a lease from the book and keeps a tombstone for retries and late reports.
    pub(super) fn close(
        &mut self,
        lease_id: LeaseId,
        closed_as: ClosedAs,
        request_id: u64,
        outcome: Outcome,
        now: Nanos,
    ) {
        let Some(rec) = self.book.remove(lease_id) else {
            return;
        };
        if let Some(acct) = self.accounts.get_mut(&rec.lease.key) {
            acct.leases -= 1;
            if let Some(slot) = acct.holders.get_mut(&rec.lease.holder_id) {
                if slot.current == Some(lease_id) {
                    slot.current = None;
                    // The holder gave up the lease its last answer was about, with a later
                    // request: that answer can no longer be asked for again, and keeping it
                    // (a whole lease) was the largest part of an idle key. The release's
                    // small answer takes its place, so older requests stay refused as stale.
                    if closed_as == ClosedAs::Released && request_id > slot.last_request_id {
                        slot.last_request_id = request_id;
                        slot.last_outcome = Some(outcome.clone());
                    }
                }
                slot.last_seen = slot.last_seen.max(now);
            }
        }
        self.tombstones.insert(
            lease_id,
            Tombstone {
                key: rec.lease.key,
                holder_id: rec.lease.holder_id,
                closed_as,
                request_id,
                outcome,
            },
        );
        self.tombstone_order.push_back((now, lease_id));
    }
}

/// Where a lease's credit came from.
pub(super) fn origin_of(lease: &crate::lease::Lease) -> Origin {
    Origin {
        parent: lease.parent_lease_id,
        issued_at: Nanos(lease.issued_at_ns),
    }
}

/// A retry of the last request gets the last answer; an older request is refused.
fn replay(slot: &HolderSlot, request_id: u64) -> Result<Option<Outcome>, LedgerError> {
    if slot.last_outcome.is_some() {
        if request_id == slot.last_request_id {
            return Ok(slot.last_outcome.clone());
        }
        if request_id < slot.last_request_id {
            return Err(LedgerError::StaleRequest {
                request_id,
                last: slot.last_request_id,
            });
        }
    }
    Ok(None)
}

/// A lease's usage as the ledger last heard it.
struct Usage {
    used: u64,
    returned: u64,
    /// Everything ever granted on the lease: current credit plus what was handed back.
    granted: u64,
}

impl Usage {
    /// Checks a newer statement of cumulative `used` and `returned` against this one.
    fn check(&self, lease_id: LeaseId, used: u64, returned: u64) -> Result<(), LedgerError> {
        if used < self.used {
            return Err(LedgerError::UsageDecreased {
                lease_id,
                used,
                reported: self.used,
            });
        }
        if returned < self.returned {
            return Err(LedgerError::ReturnDecreased {
                lease_id,
                returned,
                known: self.returned,
            });
        }
        if used.checked_add(returned).is_none_or(|t| t > self.granted) {
            return Err(LedgerError::UsageExceedsCredit {
                lease_id,
                used,
                returned,
                credit: self.granted,
            });
        }
        Ok(())
    }
}
