//! A delegated ledger's own credit: what its upstream lease brought in and what goes back.

use super::account::Supply;
use super::command::{Outcome, UpstreamLease};
use super::error::LedgerError;
use super::{Ledger, Role};
use crate::time::Nanos;

impl Ledger {
    pub(super) fn upstream_granted(
        &mut self,
        u: UpstreamLease,
        now: Nanos,
    ) -> Result<Outcome, LedgerError> {
        if self.config.role != Role::Delegated {
            return Err(LedgerError::NotDelegated);
        }
        let (acct, _) = self.account_for(&u.policy_id, &u.key, now)?;
        let Supply::Upstream(sup) = &mut acct.supply else {
            return Err(LedgerError::NotDelegated);
        };
        match sup.lease_id {
            Some(active) if active != u.upstream_lease_id => {
                return Err(LedgerError::UpstreamLeaseActive {
                    key: u.key,
                    active,
                    offered: u.upstream_lease_id,
                })
            }
            Some(_) if u.credit < sup.credit_known => {
                return Err(LedgerError::UpstreamCreditDecreased {
                    lease_id: u.upstream_lease_id,
                    credit: u.credit,
                    known: sup.credit_known,
                })
            }
            _ => {}
        }
        let fresh = sup.lease_id.is_none();
        let added = if fresh {
            u.credit
        } else {
            u.credit - sup.credit_known
        };
        if fresh {
            sup.consumed = 0;
            sup.on_lease = 0;
            sup.returned = 0;
            sup.generation = 0;
        }
        sup.lease_id = Some(u.upstream_lease_id);
        sup.credit_known = u.credit;
        sup.idle += added;
        // A newer version is measured from a later send, so its deadline is not earlier;
        // taking the newest as given keeps every later sub-lease inside it. The same version
        // seen again (a replayed answer) keeps the deadline measured from its first send.
        if fresh || u.generation > sup.generation {
            sup.deadline = u.deadline;
            sup.generation = u.generation;
        }
        acct.stats.received += added;
        Ok(Outcome::Done)
    }

    pub(super) fn upstream_return(
        &mut self,
        key: &str,
        units: u64,
    ) -> Result<Outcome, LedgerError> {
        let acct = self.delegated_account(key)?;
        let Supply::Upstream(sup) = &mut acct.supply else {
            return Err(LedgerError::NotDelegated);
        };
        if sup.idle < units {
            return Err(LedgerError::NotEnoughIdle {
                key: key.to_string(),
                idle: sup.idle,
                asked: units,
            });
        }
        sup.idle -= units;
        sup.credit_known -= units;
        sup.returned += units;
        acct.stats.returned_upstream += units;
        Ok(Outcome::Done)
    }

    pub(super) fn upstream_closed(
        &mut self,
        key: &str,
        released: bool,
    ) -> Result<Outcome, LedgerError> {
        let acct = self.delegated_account(key)?;
        let Supply::Upstream(sup) = &mut acct.supply else {
            return Err(LedgerError::NotDelegated);
        };
        if released {
            acct.stats.returned_upstream += sup.idle;
        } else {
            acct.stats.lost_upstream += sup.idle;
        }
        // Sub-leases still out stay on this key's books; what they hand back later belongs
        // to the closed lease and is dropped, never re-granted.
        sup.idle = 0;
        sup.lease_id = None;
        sup.credit_known = 0;
        sup.consumed = 0;
        sup.on_lease = 0;
        sup.returned = 0;
        sup.generation = 0;
        Ok(Outcome::Done)
    }

    /// What a delegated ledger tells its upstream about `key`.
    pub fn upstream_position(&self, key: &str) -> Option<UpstreamPosition> {
        match &self.accounts.get(key)?.supply {
            Supply::Upstream(u) => Some(UpstreamPosition {
                upstream_lease_id: u.lease_id?,
                credit: u.credit_known,
                idle: u.idle,
                on_lease: u.on_lease,
                used: u.consumed,
                returned: u.returned,
                generation: u.generation,
                deadline: u.deadline,
            }),
            Supply::Bucket(_) | Supply::Window(_) => None,
        }
    }

    fn delegated_account(&mut self, key: &str) -> Result<&mut super::Account, LedgerError> {
        if self.config.role != Role::Delegated {
            return Err(LedgerError::NotDelegated);
        }
        self.accounts
            .get_mut(key)
            .ok_or_else(|| LedgerError::UnknownKey(key.to_string()))
    }
}

/// A delegated key's standing towards its upstream lease: `credit = idle + on_lease + used`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UpstreamPosition {
    pub upstream_lease_id: crate::lease::LeaseId,
    pub credit: u64,
    /// Free to sub-lease or to return upstream.
    pub idle: u64,
    /// Out on sub-leases that may still be spent.
    pub on_lease: u64,
    /// Usage to report upstream: spent or written off by sub-holders. Never decreases.
    pub used: u64,
    /// Idle credit given back on this upstream lease so far (cumulative `return_credit`).
    pub returned: u64,
    /// Generation of the newest upstream lease version applied.
    pub generation: u64,
    /// When sub-leasing of this upstream lease stops, on this ledger's timeline.
    pub deadline: Nanos,
}

impl UpstreamPosition {
    /// The final usage to release the upstream lease with, once no sub-lease of it is
    /// out. While sub-leases are out, their credit may still be spent later, and stating it
    /// spent now would let the upstream refill for it early; the upstream lease must then
    /// be left to run out (idle credit can still be returned through a report).
    pub fn final_used(&self) -> Option<u64> {
        (self.on_lease == 0).then_some(self.used)
    }
}
