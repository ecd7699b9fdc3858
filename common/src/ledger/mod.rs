//! The credit ledger: the sans-IO state machine of one grantor.
//!
//! A ledger owns the credit of many policy keys and hands it out as [`Lease`]s. Every change
//! is a [`Command`] applied at a time given with it, so replicas that apply the same
//! commands reach the same state. The promises it keeps:
//!
//! * **P1, budget bound.** A root key's token bucket refills only up to its burst *minus the
//!   credit outstanding on lease*, so stored plus leased credit never exceeds the burst and
//!   units spent anywhere stay within `B + r·T` in every window of length `T`.
//! * **P2, no double spend.** Credit comes back only through a report or release that states
//!   usage (after which the holder cannot spend it), or is written off at expiry as
//!   *stranded* and never granted again. [`Account::conserved`] checks that every unit is
//!   accounted for exactly once.
//! * **P3, clock safety.** Command times pass through a [`ClockGuard`]: a time behind the
//!   last one is clamped and counted, so a step back neither refills nor extends anything.
//!
//! A [`Role::Delegated`] ledger has no buckets: its credit is what its own upstream lease
//! gave it, and no sub-lease outlives that lease.

pub mod account;
pub mod book;
pub mod command;
pub mod decide;
pub mod entitlement;
pub mod error;
pub mod fair;
mod grant;
mod holder_ops;
mod holders;
pub mod params;
pub mod sizing;
mod tick;
mod upstream;
pub mod usage;
pub mod window;

pub use account::{Account, HolderSlot, KeyStats, Origin, Supply};
pub use book::{LeaseBook, LeaseRecord, LeaseState};
pub use command::{
    Acquire, Budget, Command, DenyReason, Grant, Outcome, Release, Report, UpstreamLease,
};
pub use decide::{Decide, DecideItem, Decided, Refund, Verdict, DECIDE_ITEMS_MAX};
pub use error::LedgerError;
pub use holders::Holders;
pub use params::{
    LeaseParams, LeaseableError, LedgerConfig, LedgerLimits, Level, PolicyParams, Role,
};
pub use upstream::UpstreamPosition;
pub use usage::{
    HolderCounts, UsageBook, UsageCounts, UsageLimits, UsageQuery, UsageReport, UsageRow,
    UsageSubject,
};
pub use window::{WindowSpec, WindowSupply};

use crate::algo::TokenBucket;
use crate::lease::{Lease, LeaseId};
use crate::time::{ClockGuard, Nanos, RollbackStats};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// How long a closed lease is remembered, so a retried release gets its first answer and a
/// late report is refused by name rather than as unknown.
pub const TOMBSTONE_TTL_MS: u64 = 120_000;

/// Why a lease left the book.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClosedAs {
    Released,
    Expired,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub key: String,
    pub holder_id: String,
    pub closed_as: ClosedAs,
    pub request_id: u64,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    config: LedgerConfig,
    epoch: u64,
    clock: ClockGuard,
    next_lease_id: LeaseId,
    policies: BTreeMap<String, PolicyParams>,
    budgets: BTreeMap<String, Budget>,
    accounts: BTreeMap<String, Account>,
    book: LeaseBook,
    tombstones: BTreeMap<LeaseId, Tombstone>,
    tombstone_order: VecDeque<(Nanos, LeaseId)>,
    evict_cursor: Option<String>,
}

impl Ledger {
    pub fn new(config: LedgerConfig) -> Self {
        Ledger {
            config,
            epoch: 0,
            clock: ClockGuard::new(Nanos::ZERO),
            next_lease_id: 1,
            policies: BTreeMap::new(),
            budgets: BTreeMap::new(),
            accounts: BTreeMap::new(),
            book: LeaseBook::default(),
            tombstones: BTreeMap::new(),
            tombstone_order: VecDeque::new(),
            evict_cursor: None,
        }
    }

    /// Applies one command at `now` (the orderer's time, clamped to never go back).
    pub fn apply(&mut self, now: Nanos, command: Command) -> Result<Outcome, LedgerError> {
        let now = self.clock.observe(now);
        match command {
            Command::PutPolicy(params) => self.put_policy(params),
            Command::RemovePolicy { policy_id } => self.remove_policy(&policy_id),
            Command::SetBudget(b) => self.set_budget(b),
            Command::Acquire(a) => self.acquire(a, now),
            Command::Report(r) => self.report(r, now),
            Command::Release(r) => self.release(r, now),
            Command::Revoke { lease_id } => self.revoke(lease_id),
            Command::Tick => Ok(self.tick(now)),
            Command::SetEpoch { epoch } => {
                self.epoch = self.epoch.max(epoch);
                Ok(Outcome::Done)
            }
            Command::UpstreamGranted(u) => self.upstream_granted(u, now),
            Command::UpstreamReturn { key, units } => self.upstream_return(&key, units),
            Command::UpstreamClosed { key, released } => self.upstream_closed(&key, released),
            Command::Decide(d) => Ok(Outcome::Decided(Box::new(self.decide(d, now)?))),
            Command::Refund(r) => Ok(Outcome::Refunded {
                units: self.refund(r, now)?,
            }),
        }
    }

    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The ledger's own time: the latest command time seen.
    pub fn now(&self) -> Nanos {
        self.clock.last()
    }

    pub fn clock_rollbacks(&self) -> RollbackStats {
        self.clock.stats()
    }

    pub fn policy(&self, policy_id: &str) -> Option<&PolicyParams> {
        self.policies.get(policy_id)
    }

    pub fn budget(&self, policy_id: &str) -> Option<&Budget> {
        self.budgets.get(policy_id)
    }

    /// A policy's parameters with its budget split applied.
    pub(crate) fn effective(&self, policy_id: &str) -> Option<PolicyParams> {
        let mut params = self.policies.get(policy_id)?.clone();
        if let Some(b) = self.budgets.get(policy_id) {
            params.weights = b.weights.clone();
            if let Some(ppm) = b.reserve_ppm {
                params.lease.reserve_ppm = ppm;
            }
        }
        Some(params)
    }

    fn set_budget(&mut self, budget: Budget) -> Result<Outcome, LedgerError> {
        if !self.policies.contains_key(&budget.policy_id) {
            return Err(LedgerError::UnknownPolicy(budget.policy_id));
        }
        if budget.reserve_ppm.is_some_and(|ppm| ppm >= params::PPM) {
            return Err(LedgerError::InvalidPolicy {
                policy_id: budget.policy_id,
                reason: "budget reserve must be below the whole".into(),
            });
        }
        let max = self.config.limits.holders_per_key_max;
        if budget.weights.len() > max {
            return Err(LedgerError::LimitReached {
                what: "budget weights".into(),
                max,
            });
        }
        self.budgets.insert(budget.policy_id.clone(), budget);
        Ok(Outcome::Done)
    }

    pub fn policies(&self) -> impl Iterator<Item = &PolicyParams> {
        self.policies.values()
    }

    pub fn account(&self, key: &str) -> Option<&Account> {
        self.accounts.get(key)
    }

    pub fn accounts(&self) -> impl Iterator<Item = (&String, &Account)> {
        self.accounts.iter()
    }

    pub fn lease(&self, lease_id: LeaseId) -> Option<&LeaseRecord> {
        self.book.get(lease_id)
    }

    pub fn leases(&self) -> impl Iterator<Item = &LeaseRecord> {
        self.book.iter()
    }

    /// Leases a tick at `now` writes off, in write-off order.
    pub fn leases_due(&self, now: Nanos) -> impl Iterator<Item = &LeaseRecord> {
        self.book.due(now.max(self.now()))
    }

    pub fn tombstone(&self, lease_id: LeaseId) -> Option<&Tombstone> {
        self.tombstones.get(&lease_id)
    }

    /// True when every key accounts for each unit it ever had exactly once.
    pub fn conserved(&self) -> bool {
        self.accounts.values().all(Account::conserved)
    }

    fn put_policy(&mut self, params: PolicyParams) -> Result<Outcome, LedgerError> {
        validate_policy(&params)?;
        if let Some(cur) = self.policies.get(&params.policy_id) {
            if params.version <= cur.version {
                return Err(LedgerError::StalePolicyVersion {
                    policy_id: params.policy_id,
                    version: params.version,
                    current: cur.version,
                });
            }
        } else if self.policies.len() >= self.config.limits.policies_max {
            return Err(LedgerError::LimitReached {
                what: "policies".into(),
                max: self.config.limits.policies_max,
            });
        }
        self.policies.insert(params.policy_id.clone(), params);
        Ok(Outcome::Done)
    }

    fn remove_policy(&mut self, policy_id: &str) -> Result<Outcome, LedgerError> {
        self.budgets.remove(policy_id);
        self.policies
            .remove(policy_id)
            .map(|_| Outcome::Done)
            .ok_or_else(|| LedgerError::UnknownPolicy(policy_id.to_string()))
    }

    /// The account for `key` under `policy_id`, created if new, on the policy's current
    /// version.
    fn account_for(
        &mut self,
        policy_id: &str,
        key: &str,
        now: Nanos,
    ) -> Result<(&mut Account, PolicyParams), LedgerError> {
        let limits = &self.config.limits;
        if key.is_empty() || key.len() > limits.key_len_max {
            return Err(LedgerError::InvalidKey {
                max: limits.key_len_max,
            });
        }
        let params = self
            .effective(policy_id)
            .ok_or_else(|| LedgerError::UnknownPolicy(policy_id.to_string()))?;
        if !self.accounts.contains_key(key) {
            if self.accounts.len() >= limits.keys_max {
                return Err(LedgerError::LimitReached {
                    what: "keys".into(),
                    max: limits.keys_max,
                });
            }
            let supply = new_supply(&self.config, &params, now);
            let acct = Account::new(params.policy_id.clone(), params.version, supply);
            self.accounts.insert(key.to_string(), acct);
        }
        let acct = self.accounts.get_mut(key).expect("inserted above");
        if acct.policy_id != policy_id {
            return Err(LedgerError::KeyPolicyMismatch {
                key: key.to_string(),
                owner: acct.policy_id.clone(),
                asked: policy_id.to_string(),
            });
        }
        let owns = self.config.owns(&params);
        sync_version(acct, &params, owns, now);
        Ok((acct, params))
    }

    fn new_lease(&mut self, fields: NewLease<'_>, now: Nanos) -> Lease {
        let lease_id = self.next_lease_id;
        self.next_lease_id += 1;
        Lease {
            lease_id,
            grantor_id: self.config.grantor_id.clone(),
            policy_id: fields.params.policy_id.clone(),
            policy_version: fields.params.version,
            key: fields.key.to_string(),
            holder_id: fields.holder_id.to_string(),
            credit: fields.credit,
            epoch: self.epoch,
            issued_at_ns: now.0,
            ttl_ms: fields.ttl_ms,
            generation: 1,
            parent_lease_id: fields.parent_lease_id,
            key_id: String::new(),
            signature: Vec::new(),
        }
    }

    fn write_off_at(&self, lease: &Lease) -> Nanos {
        let grace_ns = self.config.expiry_grace_ms.saturating_mul(1_000_000);
        Nanos(lease.grantor_expiry_ns()).saturating_add_ns(grace_ns)
    }
}

struct NewLease<'a> {
    params: &'a PolicyParams,
    key: &'a str,
    holder_id: &'a str,
    credit: u64,
    ttl_ms: u64,
    parent_lease_id: Option<LeaseId>,
}

fn validate_policy(p: &PolicyParams) -> Result<(), LedgerError> {
    let bad = |reason: &str| {
        Err(LedgerError::InvalidPolicy {
            policy_id: p.policy_id.clone(),
            reason: reason.to_string(),
        })
    };
    if p.policy_id.is_empty() {
        return bad("policy id is empty");
    }
    if p.burst == 0 {
        return bad("burst must be positive");
    }
    if p.lease.ttl_ms == 0 {
        return bad("lease ttl must be positive");
    }
    if p.lease.min_credit == 0 || p.lease.min_credit > p.lease.max_credit {
        return bad("lease credit bounds must satisfy 0 < min_credit <= max_credit");
    }
    if p.lease.reserve_ppm >= params::PPM {
        return bad("reserve must be below the whole");
    }
    Ok(())
}

/// A new key's supply: the policy's own bucket or window where this ledger owns its budget,
/// otherwise credit from the upstream lease (none yet).
fn new_supply(config: &LedgerConfig, params: &PolicyParams, now: Nanos) -> Supply {
    if !config.owns(params) {
        return Supply::Upstream(account::UpstreamSupply {
            idle: 0,
            lease_id: None,
            credit_known: 0,
            consumed: 0,
            on_lease: 0,
            deadline: Nanos::ZERO,
            generation: 0,
            returned: 0,
        });
    }
    match &params.window {
        None => Supply::Bucket(TokenBucket::full(params.rate, params.burst, now)),
        Some(spec) => Supply::Window(window::WindowSupply::open(spec.clone(), now)),
    }
}

/// Moves a key's supply onto the policy's current version, reconciling it once.
///
/// * A bucket keeps its earned credit, but never more than the new burst allows next to
///   what is out on lease.
/// * A window keeps what its current window consumed under the new limit and window, so
///   that crossing a version boundary never resets a key's usage.
/// * A bucket that becomes a window counts what the bucket was missing of its burst (spent
///   recently or on lease) as consumed in the window; a window that becomes a bucket starts
///   with what the window had left, within the new burst.
/// * A change of ownership (a scope that moves a policy's budget to or from this level)
///   drops the old supply's free credit; leases out keep their credit until they end.
fn sync_version(acct: &mut Account, params: &PolicyParams, owns: bool, now: Nanos) {
    if acct.version == params.version {
        return;
    }
    acct.version = params.version;
    acct.available(now);
    let outstanding = acct.outstanding;
    let free_before = acct.free_now();
    let target = new_supply_kind(params, owns);
    let stats = &mut acct.stats;
    match (&mut acct.supply, target) {
        (Supply::Bucket(b), SupplyKind::Bucket) => {
            let earned = b.tokens();
            b.reconfigure(params.rate, params.burst, now);
            let cap = params.burst.saturating_sub(outstanding);
            let excess = b.tokens().saturating_sub(cap);
            b.take_exact(excess);
            stats.dropped += earned - b.tokens();
        }
        (Supply::Window(w), SupplyKind::Window) => {
            let spec = params.window.clone().expect("window kind has a spec");
            let consumed = w.consumed();
            let (added, removed) = w.reconfigure(spec, consumed, now);
            stats.produced += added;
            stats.dropped += removed;
        }
        (Supply::Bucket(b), SupplyKind::Window) => {
            let spec = params.window.clone().expect("window kind has a spec");
            let consumed = b.burst().saturating_sub(b.tokens());
            let mut w = window::WindowSupply::open(spec, now);
            w.free = w.spec.limit().saturating_sub(consumed);
            stats.dropped += free_before;
            stats.produced += w.free;
            acct.supply = Supply::Window(w);
        }
        (Supply::Window(w), SupplyKind::Bucket) => {
            let mut b = TokenBucket::full(params.rate, params.burst, now);
            let keep = w.free.min(params.burst.saturating_sub(outstanding));
            b.take_exact(b.tokens() - keep);
            stats.dropped += free_before - keep;
            acct.supply = Supply::Bucket(b);
        }
        (Supply::Upstream(_), SupplyKind::Upstream) => {}
        (_, kind) => {
            if let Supply::Upstream(u) = &acct.supply {
                stats.lost_upstream += u.idle;
            } else {
                stats.dropped += free_before;
            }
            let fresh = match kind {
                SupplyKind::Upstream => new_supply(&LedgerConfig::delegated(""), params, now),
                _ => new_supply(&LedgerConfig::root(""), params, now),
            };
            stats.produced += match &fresh {
                Supply::Upstream(_) => 0,
                other => free_of(other),
            };
            acct.supply = fresh;
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum SupplyKind {
    Bucket,
    Window,
    Upstream,
}

fn new_supply_kind(params: &PolicyParams, owns: bool) -> SupplyKind {
    match (owns, &params.window) {
        (false, _) => SupplyKind::Upstream,
        (true, None) => SupplyKind::Bucket,
        (true, Some(_)) => SupplyKind::Window,
    }
}

fn free_of(supply: &Supply) -> u64 {
    match supply {
        Supply::Bucket(b) => b.tokens(),
        Supply::Upstream(u) => u.idle,
        Supply::Window(w) => w.free,
    }
}

#[cfg(test)]
mod tests;
