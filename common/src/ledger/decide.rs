//! Exact decisions: the owning ledger admits or refuses each request itself.
//!
//! A policy with `enforcement: exact` leases no credit. Every request is one [`Decide`]
//! command naming the keys it spends (one per exact dimension) and is applied in log order,
//! so the ledger's count is the fleet's count and no window or period admits more than its
//! limit, whatever the number of enforcers. A decision is all or nothing: if any item does
//! not fit, nothing is charged.
//!
//! An enforcer whose request is refused by another of its dimensions after the allocator
//! admitted it gives the units back with a [`Refund`]. Units go back only to the window (or
//! bucket) they were taken from: a refund that arrives after its window ended changes
//! nothing, and a lost refund leaves the units counted as used, which only ever errs on the
//! side of admitting less.

use super::account::Supply;
use super::error::LedgerError;
use super::Ledger;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Most items one decision may name: an enforcer's request has at most this many
/// dimensions.
pub const DECIDE_ITEMS_MAX: usize = 32;

/// One key a request spends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideItem {
    pub policy_id: String,
    pub key: String,
    pub units: u64,
}

/// A request to decide: every item fits, or nothing is charged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decide {
    pub items: Vec<DecideItem>,
}

/// Gives back the units of an admitted decision whose request was refused elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    pub items: Vec<DecideItem>,
    /// The decision's time on the ledger's timeline, as [`Decided::at`] stated it.
    pub decided_at: Nanos,
}

/// One item's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether this item fitted (the decision admits only if all did).
    pub fits: bool,
    /// Units left for the key after the decision.
    pub remaining: u64,
    /// When the key is back to its whole limit (a window's end, a bucket's refill).
    pub reset_after_ns: u64,
    /// For an item that did not fit: how long until it could.
    pub retry_after_ns: u64,
}

/// A decision's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub admitted: bool,
    /// One per item, in order.
    pub verdicts: Vec<Verdict>,
    /// The ledger time the decision was made at, for a later [`Refund`].
    pub at: Nanos,
}

impl Ledger {
    pub(super) fn decide(&mut self, d: Decide, now: Nanos) -> Result<Decided, LedgerError> {
        self.check_decide_items(&d.items)?;
        let mut verdicts = Vec::with_capacity(d.items.len());
        let mut taken = 0;
        for item in &d.items {
            let (acct, _) = self.account_for(&item.policy_id, &item.key, now)?;
            let free = acct.decidable(now);
            let fits = item.units <= free;
            if fits {
                acct.spend_now(item.units);
                taken += 1;
            }
            verdicts.push(verdict_of(&acct.supply, fits, free, item.units, now));
            if !fits {
                break;
            }
        }
        let admitted = taken == d.items.len();
        if !admitted {
            // Put back what the items before the one that did not fit took, at the same
            // time and so into the same window: as if nothing had been asked.
            for (item, v) in d.items.iter().zip(verdicts.iter_mut()).take(taken) {
                if let Some(acct) = self.accounts.get_mut(&item.key) {
                    acct.unspend(item.units, now, now);
                }
                v.remaining = v.remaining.saturating_add(item.units);
            }
        }
        Ok(Decided {
            admitted,
            verdicts,
            at: now,
        })
    }

    pub(super) fn refund(&mut self, r: Refund, now: Nanos) -> Result<u64, LedgerError> {
        self.check_decide_items(&r.items)?;
        let mut returned = 0;
        for item in &r.items {
            let Some(acct) = self.accounts.get_mut(&item.key) else {
                // The key was dropped since: it held nothing worth keeping, so the units
                // were already free again.
                continue;
            };
            if acct.policy_id != item.policy_id {
                continue;
            }
            returned += acct.unspend(item.units, r.decided_at, now);
        }
        Ok(returned)
    }

    /// Every item names an exact policy this ledger owns, and there are not too many.
    fn check_decide_items(&self, items: &[DecideItem]) -> Result<(), LedgerError> {
        if items.is_empty() || items.len() > DECIDE_ITEMS_MAX {
            return Err(LedgerError::DecideItems {
                count: items.len(),
                max: DECIDE_ITEMS_MAX,
            });
        }
        for item in items {
            let params = self
                .policies
                .get(&item.policy_id)
                .ok_or_else(|| LedgerError::UnknownPolicy(item.policy_id.clone()))?;
            if !params.exact {
                return Err(LedgerError::NotExact(item.policy_id.clone()));
            }
            if !self.config.owns(params) {
                return Err(LedgerError::NotOwner {
                    policy_id: item.policy_id.clone(),
                    owner: params.owner,
                });
            }
        }
        Ok(())
    }
}

/// What an item's key looks like after the decision.
fn verdict_of(supply: &Supply, fits: bool, free: u64, units: u64, now: Nanos) -> Verdict {
    let remaining = if fits { free - units } else { free };
    let (reset_after_ns, retry_after_ns) = match supply {
        Supply::Bucket(b) => {
            let retry = if fits { 0 } else { b.ns_until(units) };
            (b.ns_until(b.burst()), retry)
        }
        Supply::Window(w) => {
            let reset = w.end.saturating_since(now);
            let retry = if fits {
                0
            } else {
                w.ns_until(units - free, now)
            };
            (reset, retry)
        }
        // Exact policies are decided only where they are owned (checked first).
        Supply::Upstream(_) => (0, u64::MAX),
    };
    Verdict {
        fits,
        remaining,
        reset_after_ns,
        retry_after_ns,
    }
}

#[cfg(test)]
mod tests;
