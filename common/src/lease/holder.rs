//! Holder-side lease bookkeeping, shared by agents and by allocators that hold an upstream
//! lease. Sans-IO: every time is a reading of the holder's monotonic clock, passed in.
//!
//! The rules that keep credit from being spent twice:
//! * spending stops at the version's `credit`, minus credit handed back that the version is
//!   not known to reflect yet;
//! * spending stops at the holder-side deadline ([`HolderConfig::deadline`]), which falls
//!   before the grantor's expiry however the holder's clock drifts within its declared bound;
//! * once released, replaced, expired or revoked, a lease never spends again, even if the
//!   clock later reads earlier (the newest reading seen is what counts).
//!
//! Reports are cumulative (`used`, `return_credit`), so a lost, repeated or reordered report
//! can neither lose usage nor return the same credit twice.
//!
//! What the grantor must do for this to hold: keep the largest `used` and `return_credit`
//! it has received for the lease; sign each new version with `credit` = total granted minus
//! that largest `return_credit`; and answer only a report it has applied. The holder asks
//! for every renewal with a report built by [`HeldLease::report`], so it can tell which of
//! its returns a version certainly reflects and keeps withholding the others.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::demand::Demand;
use super::holder_config::{HolderConfig, HolderConfigError};
use super::{Lease, LeaseId};
use crate::time::Nanos;

/// Where a held lease is in its life. Every state but `Active` is final for spending.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LeaseState {
    /// Spendable until its credit or deadline runs out.
    Active,
    /// Spending stopped; the release carrying the final usage is pending. `replaced` when a
    /// lease under a newer policy version takes over.
    Closing { replaced: bool },
    /// The grantor acknowledged the release.
    Released,
    /// The holder-side deadline passed.
    Expired,
    /// The grantor revoked it.
    Revoked,
}

/// Why a spend was refused. Carries only integers, so refusing allocates nothing.
#[derive(Copy, Clone, Debug, Error, PartialEq, Eq)]
pub enum SpendError {
    #[error("lease is {state:?}, not active")]
    NotActive { state: LeaseState },
    #[error("lease expired at holder time {deadline_ns} ns")]
    Expired { deadline_ns: u64 },
    #[error("requested {requested} units but only {available} remain on the lease")]
    InsufficientCredit { requested: u64, available: u64 },
}

/// Why a renewal was refused; the held lease is unchanged.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RenewalError {
    #[error("lease {lease_id} is {state:?}; only an active lease can be renewed")]
    NotActive {
        lease_id: LeaseId,
        state: LeaseState,
    },
    #[error("renewal is for lease_id {offered}, the held lease is {held}")]
    WrongLeaseId { held: LeaseId, offered: LeaseId },
    #[error("renewal of lease {lease_id} changes {field}, which names the lease")]
    IdentityChanged {
        lease_id: LeaseId,
        field: &'static str,
    },
    #[error("renewal of lease {lease_id} has generation {offered}, not above held {held}")]
    StaleGeneration {
        lease_id: LeaseId,
        held: u64,
        offered: u64,
    },
    #[error("renewal of lease {lease_id} has epoch {offered}, below held {held}")]
    StaleEpoch {
        lease_id: LeaseId,
        held: u64,
        offered: u64,
    },
    #[error("renewal of lease {lease_id} grants credit {credit}, below the {spent} already spent")]
    CreditBelowSpent {
        lease_id: LeaseId,
        credit: u64,
        spent: u64,
    },
}

/// What a holder tells its grantor about a lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    pub lease_id: LeaseId,
    /// The version the holder holds when reporting.
    pub generation: u64,
    /// Total units spent under the lease so far (cumulative).
    pub used: u64,
    /// Total units handed back over the lease's life (cumulative, not a delta).
    pub return_credit: u64,
    /// Additional credit asked for; zero when the holder needs none.
    pub want_credit: u64,
    /// Measured demand.
    pub demand: Demand,
    /// The holder has stopped spending: `used` is final and the lease can be reclaimed.
    pub final_usage: bool,
}

/// A sent report: when, and the cumulative return it carried.
#[derive(Copy, Clone, Debug)]
struct ReportMark {
    sent_at: Nanos,
    returned: u64,
}

/// One lease as its holder tracks it.
#[derive(Clone, Debug)]
pub struct HeldLease {
    lease: Lease,
    config: HolderConfig,
    sent_at: Nanos,
    deadline: Nanos,
    state: LeaseState,
    spent: u64,
    /// Units handed back so far (cumulative).
    returned: u64,
    /// What `spent` may reach: the version's credit less the returns it may not reflect.
    ceiling: u64,
    /// Newest clock reading seen, so a reading that goes back cannot reopen the lease.
    latest: Nanos,
    /// Oldest first; `sent_at` strictly increasing, `returned` non-decreasing.
    reports: VecDeque<ReportMark>,
}

impl HeldLease {
    /// Starts holding `lease`, granted in answer to a request sent at `sent_at`. The caller
    /// verifies the signature first (see [`super::sign::LeaseVerifier`]).
    pub fn new(
        lease: Lease,
        sent_at: Nanos,
        config: HolderConfig,
    ) -> Result<Self, HolderConfigError> {
        config.validate()?;
        Ok(HeldLease {
            deadline: config.deadline(sent_at, lease.ttl_ms),
            ceiling: lease.credit,
            reports: VecDeque::with_capacity(config.reports_tracked_max),
            config,
            sent_at,
            state: LeaseState::Active,
            spent: 0,
            returned: 0,
            latest: sent_at,
            lease,
        })
    }

    /// The newest accepted version.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The held lease's id.
    pub fn lease_id(&self) -> LeaseId {
        self.lease.lease_id
    }

    /// Where the lease is in its life.
    pub fn state(&self) -> LeaseState {
        self.state
    }

    /// Holder-side expiry of the newest version; no spend succeeds at or after it.
    pub fn deadline(&self) -> Nanos {
        self.deadline
    }

    /// When the request behind the newest version was sent.
    pub fn sent_at(&self) -> Nanos {
        self.sent_at
    }

    /// Units admitted so far.
    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// Units handed back so far.
    pub fn returned(&self) -> u64 {
        self.returned
    }

    /// The most `spent` may reach under the newest version (below `spent` when returns
    /// not yet reflected exceed what is left).
    pub fn ceiling(&self) -> u64 {
        self.ceiling
    }

    /// Admits `units` at `now`, or refuses without changing anything but the expiry latch.
    pub fn try_spend(&mut self, units: u64, now: Nanos) -> Result<(), SpendError> {
        self.observe(now);
        match self.state {
            LeaseState::Active => {}
            LeaseState::Expired => {
                return Err(SpendError::Expired {
                    deadline_ns: self.deadline.0,
                })
            }
            state => return Err(SpendError::NotActive { state }),
        }
        let available = self.ceiling.saturating_sub(self.spent);
        if units > available {
            return Err(SpendError::InsufficientCredit {
                requested: units,
                available,
            });
        }
        self.spent += units;
        Ok(())
    }

    /// Units a spend at `now` could take.
    pub fn spendable(&self, now: Nanos) -> u64 {
        if self.state != LeaseState::Active || self.is_expired(now) {
            return 0;
        }
        self.ceiling.saturating_sub(self.spent)
    }

    /// Whether the holder-side deadline has passed at `now` (or at any earlier reading).
    pub fn is_expired(&self, now: Nanos) -> bool {
        self.state == LeaseState::Expired || now.max(self.latest) >= self.deadline
    }

    /// Adopts a newer version of this lease, answering the report sent at `sent_at` (the
    /// reading passed to [`Self::report`]; the initial request's send time when no report
    /// was sent yet). The deadline becomes the new version's, even if that is earlier, and
    /// returns made after that report stay withheld. On error nothing changes.
    ///
    /// A version that arrives after the deadline passed but before any spend or report
    /// noticed it is accepted: the grantor signing it shows it still held the lease.
    pub fn apply_renewal(&mut self, new: Lease, sent_at: Nanos) -> Result<(), RenewalError> {
        self.check_renewal(&new)?;
        let reflected = self.returns_reflected_at(sent_at);
        let unreflected = self.returned.saturating_sub(reflected);
        self.ceiling = new.credit.saturating_sub(unreflected);
        self.deadline = self.config.deadline(sent_at, new.ttl_ms);
        self.sent_at = sent_at;
        self.lease = new;
        Ok(())
    }

    fn check_renewal(&self, new: &Lease) -> Result<(), RenewalError> {
        let held = &self.lease;
        let lease_id = held.lease_id;
        if self.state != LeaseState::Active {
            return Err(RenewalError::NotActive {
                lease_id,
                state: self.state,
            });
        }
        if new.lease_id != lease_id {
            return Err(RenewalError::WrongLeaseId {
                held: lease_id,
                offered: new.lease_id,
            });
        }
        let changed = if new.grantor_id != held.grantor_id {
            Some("grantor_id")
        } else if new.holder_id != held.holder_id {
            Some("holder_id")
        } else if new.policy_id != held.policy_id {
            Some("policy_id")
        } else if new.policy_version != held.policy_version {
            Some("policy_version")
        } else if new.key != held.key {
            Some("key")
        } else {
            None
        };
        if let Some(field) = changed {
            return Err(RenewalError::IdentityChanged { lease_id, field });
        }
        if new.generation <= held.generation {
            return Err(RenewalError::StaleGeneration {
                lease_id,
                held: held.generation,
                offered: new.generation,
            });
        }
        if new.epoch < held.epoch {
            return Err(RenewalError::StaleEpoch {
                lease_id,
                held: held.epoch,
                offered: new.epoch,
            });
        }
        if new.credit < self.spent {
            return Err(RenewalError::CreditBelowSpent {
                lease_id,
                credit: new.credit,
                spent: self.spent,
            });
        }
        Ok(())
    }

    /// The cumulative return a version answering a report sent at `sent_at` certainly
    /// reflects: that of the earliest report sent at the newest reading not after `sent_at`
    /// (returns only grow, so anything sent no later carried no more). Zero when no such
    /// report is remembered, which is the safe answer.
    fn returns_reflected_at(&self, sent_at: Nanos) -> u64 {
        self.reports
            .iter()
            .rev()
            .find(|m| m.sent_at <= sent_at)
            .map_or(0, |m| m.returned)
    }

    /// Hands back up to `units` of unspent credit: they stop being spendable at once.
    /// Returns the units actually handed back (zero unless active); the next report carries
    /// them in its cumulative `return_credit`.
    pub fn prepare_return(&mut self, units: u64) -> u64 {
        if self.state != LeaseState::Active {
            return 0;
        }
        let amount = units.min(self.ceiling.saturating_sub(self.spent));
        self.ceiling -= amount;
        self.returned += amount;
        amount
    }

    /// The report to send at `now`, with the credit to ask for given measured `demand`.
    /// The caller sends it, and passes the same `now` to [`Self::apply_renewal`] when the
    /// answer arrives.
    pub fn report(&mut self, now: Nanos, demand: Demand) -> UsageReport {
        let now = self.observe(now);
        self.remember_report(now);
        UsageReport {
            lease_id: self.lease.lease_id,
            generation: self.lease.generation,
            used: self.spent,
            return_credit: self.returned,
            want_credit: self.needs_refresh(now, demand).unwrap_or(0),
            demand,
            final_usage: self.state != LeaseState::Active,
        }
    }

    fn remember_report(&mut self, now: Nanos) {
        // Same reading as the previous report: keep its (smaller or equal) return, so a
        // renewal naming this reading is never credited with more than it reflects.
        if self.reports.back().is_some_and(|m| m.sent_at == now) {
            return;
        }
        if self.reports.len() >= self.config.reports_tracked_max {
            self.reports.pop_front();
        }
        self.reports.push_back(ReportMark {
            sent_at: now,
            returned: self.returned,
        });
    }

    /// Refresh-before-empty: `Some(additional credit to ask for)` when, at `demand`, the
    /// credit left would last less than the refresh horizon, or the deadline is within it.
    /// The size is demand × horizon, clamped to the configured request bounds.
    pub fn needs_refresh(&self, now: Nanos, demand: Demand) -> Option<u64> {
        if self.state != LeaseState::Active || self.is_expired(now) {
            return None;
        }
        let now = now.max(self.latest);
        let horizon_ms = self.config.refresh_horizon_ms;
        let remaining = self.ceiling.saturating_sub(self.spent);
        let runs_dry = demand.outruns(remaining, horizon_ms);
        let ends_soon = self.deadline.saturating_since(now) <= self.config.refresh_horizon_ns();
        if !(runs_dry || ends_soon) {
            return None;
        }
        let want = demand.units_over_ms_ceil(horizon_ms);
        Some(want.clamp(
            self.config.min_request_credit,
            self.config.max_request_credit,
        ))
    }

    /// Stops spending for a release and returns the final usage to report.
    pub fn close_for_release(&mut self) -> u64 {
        self.close(false)
    }

    /// Stops spending because a lease under a newer policy version replaces this one;
    /// returns the final usage to report in its release.
    pub fn close_for_replacement(&mut self) -> u64 {
        self.close(true)
    }

    fn close(&mut self, replaced: bool) -> u64 {
        if self.state == LeaseState::Active {
            self.state = LeaseState::Closing { replaced };
        }
        self.spent
    }

    /// The grantor acknowledged the release. Expired and revoked leases stay so.
    pub fn mark_released(&mut self) {
        if matches!(self.state, LeaseState::Active | LeaseState::Closing { .. }) {
            self.state = LeaseState::Released;
        }
    }

    /// The grantor revoked the lease: no spend succeeds from now on.
    pub fn mark_revoked(&mut self) {
        if self.state != LeaseState::Released {
            self.state = LeaseState::Revoked;
        }
    }

    /// Takes in a clock reading: never lets time go back, and latches expiry.
    fn observe(&mut self, now: Nanos) -> Nanos {
        self.latest = self.latest.max(now);
        if self.state == LeaseState::Active && self.latest >= self.deadline {
            self.state = LeaseState::Expired;
        }
        self.latest
    }
}
