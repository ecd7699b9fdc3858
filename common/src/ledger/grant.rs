//! Making new leases: sizing, booking and the holder slots they hang off.

use super::account::{Account, HolderSlot};
use super::book::{LeaseRecord, LeaseState};
use super::command::{Grant, Outcome, Report};
use super::error::LedgerError;
use super::sizing::{demand_per_horizon, size_grant, Ask};
use super::{Ledger, NewLease, PolicyParams, Supply};
use crate::time::Nanos;

impl Ledger {
    pub(super) fn grant_replacement(
        &mut self,
        key: &str,
        r: &Report,
        params: &PolicyParams,
        now: Nanos,
        leases_max: usize,
    ) -> Result<Option<super::Lease>, LedgerError> {
        let want = r.want_credit.max(params.lease.min_credit);
        let (acct, params) = self.account_for(&params.policy_id, key, now)?;
        if let Some(slot) = acct.holders.get_mut(&r.holder_id) {
            slot.current = None;
        }
        let _ = acct;
        match self.grant_new(
            key,
            &r.holder_id,
            want,
            r.priority,
            &params,
            now,
            leases_max,
        )? {
            Outcome::Granted(g) => Ok(Some(g.lease)),
            _ => Ok(None),
        }
    }

    /// Sizes and books a brand-new lease for `holder_id` on `key`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn grant_new(
        &mut self,
        key: &str,
        holder_id: &str,
        want: u64,
        priority: u32,
        params: &PolicyParams,
        now: Nanos,
        leases_max: usize,
    ) -> Result<Outcome, LedgerError> {
        if self.book.len() >= leases_max {
            return Err(LedgerError::LimitReached {
                what: "leases".into(),
                max: leases_max,
            });
        }
        let acct = self.accounts.get_mut(key).expect("account exists");
        let demand = acct.holders.get(holder_id).map_or(0, |s| {
            demand_per_horizon(s.demand_milli_per_sec, params.lease.refresh_horizon_ms)
        });
        let want = if want == 0 {
            demand.max(params.lease.min_credit)
        } else {
            want
        };
        let ask = Ask {
            holder_id,
            want,
            priority,
            held: 0,
        };
        let credit = match size_grant(acct, params, &ask, now) {
            Ok(units) => units,
            Err((reason, retry_after_ns)) => {
                return Ok(Outcome::Denied {
                    reason,
                    retry_after_ns,
                })
            }
        };
        acct.put_on_lease(credit);
        acct.leases += 1;
        let ttl_ms = lease_ttl_ms(acct, params, now);
        let parent_lease_id = match &acct.supply {
            Supply::Upstream(u) => u.lease_id,
            Supply::Bucket(_) | Supply::Window(_) => None,
        };
        let lease = self.new_lease(
            NewLease {
                params,
                key,
                holder_id,
                credit,
                ttl_ms,
                parent_lease_id,
            },
            now,
        );
        let write_off_at = self.write_off_at(&lease);
        self.book.insert(LeaseRecord {
            lease: lease.clone(),
            used: 0,
            returned: 0,
            state: LeaseState::Active,
            write_off_at,
        });
        let acct = self.accounts.get_mut(key).expect("account exists");
        if let Some(slot) = acct.holders.get_mut(holder_id) {
            slot.current = Some(lease.lease_id);
        }
        Ok(Outcome::Granted(Box::new(Grant {
            lease,
            added: credit,
            replacement: None,
            retry_after_ns: 0,
        })))
    }
}

/// The holder's slot on a key, made room for by dropping holders idle past a lease ttl.
pub(super) fn slot_for<'a>(
    acct: &'a mut Account,
    holder_id: &str,
    now: Nanos,
    holders_max: usize,
    ttl_ms: u64,
) -> Result<&'a mut HolderSlot, LedgerError> {
    if !acct.holders.contains_key(holder_id) {
        if acct.holders.len() >= holders_max {
            let idle_ns = ttl_ms.saturating_mul(1_000_000);
            acct.holders
                .retain(|_, s| s.current.is_some() || now.saturating_since(s.last_seen) < idle_ns);
        }
        if acct.holders.len() >= holders_max {
            return Err(LedgerError::LimitReached {
                what: "holders per key".into(),
                max: holders_max,
            });
        }
        acct.holders.insert(
            holder_id.to_string(),
            HolderSlot {
                current: None,
                demand_milli_per_sec: 0,
                priority: 0,
                last_seen: now,
                last_request_id: 0,
                last_outcome: None,
                entitled: Default::default(),
            },
        );
    }
    Ok(acct.holders.get_mut(holder_id).expect("inserted above"))
}

/// A lease's ttl: the policy's, cut short so a sub-lease never outlives the upstream lease
/// and window credit never outlives its window.
pub(super) fn lease_ttl_ms(acct: &Account, params: &PolicyParams, now: Nanos) -> u64 {
    match &acct.supply {
        Supply::Bucket(_) => params.lease.ttl_ms,
        Supply::Upstream(u) => params
            .lease
            .ttl_ms
            .min(u.deadline.saturating_since(now) / 1_000_000),
        Supply::Window(w) => params.lease.ttl_ms.min(w.ttl_cap_ms(now)),
    }
}
