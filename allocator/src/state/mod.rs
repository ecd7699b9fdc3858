//! The allocator's replicated state: the credit ledger plus everything admins change.
//!
//! [`AllocatorState`] is a [`Machine`]: every change is a [`StateCommand`] applied at the
//! time the orderer stamped into it, so all replicas agree. It holds the ledger, the
//! versioned policy documents, emergency switches, the audit trail and the events pushed to
//! holders on their watch streams. Admin changes always write an audit entry naming the
//! caller, with the state before and after.

mod admin;
pub mod backup;
mod batch;
mod earlier;
mod preview;
mod ratelimit;
pub mod records;
mod shadow;
mod usage;

pub use admin::{prepare as admin_prepare, AdminError};
pub use preview::{rate_milli_of, RatePreview};
pub use ratelimit::ledger_policy_ids;
pub use records::{AuditEntry, Emergency, EmergencyMode, Event, EventKind};
pub use shadow::{ShadowBook, ShadowTally};

use crate::replica::Machine;
use leasehold_common::ledger::{
    Acquire, Command, HolderCounts, Ledger, LedgerConfig, LedgerError, Outcome, PolicyParams,
    Release, Report, UsageBook, UsageLimits,
};
use leasehold_common::policy::{PolicySet, PolicySetLimits};
use leasehold_common::time::Nanos;
use records::Ring;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Audit entries kept; older ones are dropped (export them if you need more).
pub const AUDIT_ENTRIES_MAX: usize = 10_000;
/// Watch events kept for holders that reconnect with `after_seq`.
pub const WATCH_EVENTS_MAX: usize = 4_096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateCommand {
    /// A holder's acquire, report or release, or the ledger's tick.
    Ledger(Command),
    /// A holder's report on a lease of a shadow-mode policy, with the requests the policy
    /// would have denied under the lease so far (cumulative).
    ShadowReport { report: Report, would_deny: u64 },
    ApplyPolicy {
        yaml: String,
        shadow: bool,
        /// 0: the document's own `effective_at`, or now.
        effective_at_ns: u64,
        actor: String,
    },
    RollbackPolicy {
        policy_id: String,
        to_version: u64,
        actor: String,
    },
    SetRate {
        policy_id: String,
        rate_milli_per_sec: u64,
        burst: u64,
        actor: String,
    },
    SplitBudget {
        policy_id: String,
        weights: BTreeMap<String, u64>,
        reserve_ppm: Option<u64>,
        actor: String,
    },
    Revoke {
        lease_id: u64,
        reason: String,
        actor: String,
    },
    SetEmergency {
        emergency: Emergency,
        reason: String,
        actor: String,
    },
    /// A new root cluster takes on the state of a backup (see [`backup`]).
    Restore {
        backup: Vec<u8>,
        reason: String,
        actor: String,
    },
    /// A delegated allocator takes on its upstream's newest version of a policy.
    MirrorPolicy {
        yaml: String,
        upstream_version: u64,
        actor: String,
    },
    /// A holder's report carrying its own cumulative counts under the lease (refused,
    /// shaped, fail-open), and the would-deny count of a shadow-mode policy.
    CountedReport {
        report: Report,
        would_deny: u64,
        counts: HolderCounts,
    },
    /// A holder's release carrying its final counts under the lease.
    CountedRelease {
        release: Release,
        counts: HolderCounts,
    },
    /// A holder's acquire carrying the counts it made for the key while it held no lease
    /// there (since the grantor last acknowledged any).
    CountedAcquire {
        acquire: Acquire,
        counts: HolderCounts,
    },
    /// The calls of one holder's `LeaseBatch`, applied in order at one time as one
    /// command. Each is one of the holder forms above (acquire, report, release), never
    /// another batch; anything else is answered `Refused` without being applied.
    LeaseCalls(Vec<StateCommand>),
}

impl StateCommand {
    /// Whether this is a holder's acquire, report or release, in any of its forms.
    pub fn is_lease_call(&self) -> bool {
        matches!(
            self,
            StateCommand::Ledger(Command::Acquire(_) | Command::Report(_) | Command::Release(_))
                | StateCommand::ShadowReport { .. }
                | StateCommand::CountedReport { .. }
                | StateCommand::CountedRelease { .. }
                | StateCommand::CountedAcquire { .. }
        )
    }

    /// The command for a holder's report: the older, smaller forms while the holder has no
    /// counts of its own, so their log entries stay as they were.
    pub fn report(report: Report, shadow_would_deny: u64, counts: HolderCounts) -> StateCommand {
        match (shadow_would_deny, counts.is_zero()) {
            (0, true) => StateCommand::Ledger(Command::Report(report)),
            (would_deny, true) => StateCommand::ShadowReport { report, would_deny },
            (would_deny, false) => StateCommand::CountedReport {
                report,
                would_deny,
                counts,
            },
        }
    }

    /// The command for a holder's acquire, as [`StateCommand::report`].
    pub fn acquire(acquire: Acquire, counts: HolderCounts) -> StateCommand {
        if counts.is_zero() {
            StateCommand::Ledger(Command::Acquire(acquire))
        } else {
            StateCommand::CountedAcquire { acquire, counts }
        }
    }

    /// The command for a holder's release, as [`StateCommand::report`].
    pub fn release(release: Release, counts: HolderCounts) -> StateCommand {
        if counts.is_zero() {
            StateCommand::Ledger(Command::Release(release))
        } else {
            StateCommand::CountedRelease { release, counts }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateOutput {
    Ledger(Result<Outcome, LedgerError>),
    Policy {
        policy_id: String,
        version: u64,
        changed: bool,
        diff: String,
    },
    Revoked {
        outstanding: u64,
    },
    Emergency {
        previous: Emergency,
        watch_seq: u64,
    },
    Budget,
    Restored(backup::Restored),
    Refused(AdminError),
    /// One output per call of a `LeaseCalls` command, in order.
    Batch(Vec<StateOutput>),
}

/// A policy version waiting for its effective time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub version: u64,
    pub effective_at_ns: u64,
}

/// Who last changed a policy, and when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyMeta {
    pub updated_by: String,
    pub updated_at_ns: u64,
    pub effective_at_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorState {
    ledger: Ledger,
    policies: PolicySet,
    meta: BTreeMap<String, PolicyMeta>,
    pending: BTreeMap<String, Pending>,
    emergency: BTreeMap<String, Emergency>,
    audit: Ring<AuditEntry>,
    events: Ring<Event>,
    shadow: ShadowBook,
    /// Usage per policy, key and holder in hourly buckets (absent from snapshots and
    /// backups of earlier releases; see [`earlier`]).
    usage: UsageBook,
}

impl AllocatorState {
    pub fn new(ledger: LedgerConfig) -> Self {
        AllocatorState {
            ledger: Ledger::new(ledger),
            policies: PolicySet::new(PolicySetLimits::default()),
            meta: BTreeMap::new(),
            pending: BTreeMap::new(),
            emergency: BTreeMap::new(),
            audit: Ring::new(AUDIT_ENTRIES_MAX),
            events: Ring::new(WATCH_EVENTS_MAX),
            shadow: ShadowBook::default(),
            usage: UsageBook::default(),
        }
    }

    /// The same state keeping usage within `limits` (set before anything is recorded;
    /// every node of a cluster must use the same limits).
    pub fn with_usage_limits(mut self, limits: UsageLimits) -> Self {
        self.usage = UsageBook::new(limits);
        self
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    pub fn meta(&self, policy_id: &str) -> Option<&PolicyMeta> {
        self.meta.get(policy_id)
    }

    pub fn emergency(&self, policy_id: &str) -> Emergency {
        self.emergency
            .get(policy_id)
            .cloned()
            .unwrap_or_else(|| Emergency {
                policy_id: policy_id.to_string(),
                ..Emergency::default()
            })
    }

    pub fn audit(&self) -> impl DoubleEndedIterator<Item = &AuditEntry> {
        self.audit.iter()
    }

    /// Events with a sequence number above `after_seq`, oldest first.
    pub fn events_after(&self, after_seq: u64) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(move |e| e.seq > after_seq)
    }

    pub fn next_event_seq(&self) -> u64 {
        self.events.next_seq()
    }

    /// Whether a holder resuming after `after_seq` may have missed events no longer kept
    /// (or starts fresh), and so needs the current state first.
    pub fn needs_catch_up(&self, after_seq: u64) -> bool {
        after_seq == 0
            || self
                .events
                .iter()
                .next()
                .is_some_and(|oldest| after_seq + 1 < oldest.seq)
    }

    /// Every emergency switch that was ever set (normal ones included).
    pub fn emergencies(&self) -> impl Iterator<Item = &Emergency> {
        self.emergency.values()
    }

    /// The version of `policy_id` holders enforce now: the newest, unless that one still
    /// waits for its effective time.
    pub fn effective_version(&self, policy_id: &str) -> Option<u64> {
        let newest = self.policies.get(policy_id)?.version;
        match self.pending.get(policy_id) {
            Some(p) if p.version == newest => newest.checked_sub(1).filter(|v| *v > 0),
            _ => Some(newest),
        }
    }

    fn tick(&mut self, now: Nanos) -> StateOutput {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.effective_at_ns <= now.0)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            if let Some(p) = self.pending.remove(&id) {
                self.make_effective(&id, p.version, now);
            }
        }
        self.ledger_tick(now)
    }

    /// Hands version `version` of a policy to the ledger (if it is leased; for an
    /// envoyproxy/ratelimit domain, each of its rules) and tells holders.
    fn make_effective(&mut self, policy_id: &str, version: u64, now: Nanos) {
        if let Ok(v) = self.policies.get_version(policy_id, version) {
            if v.policy.ratelimit.is_some() {
                self.put_domain_rules(policy_id, version, now);
            } else if let Ok(params) = PolicyParams::from_policy(&v.policy, version) {
                // A stale or refused version leaves the ledger on the previous one.
                let _ = self.ledger.apply(now, Command::PutPolicy(params));
            }
        }
        let id = policy_id.to_string();
        self.events.push(|seq| Event {
            seq,
            kind: EventKind::PolicyChanged {
                policy_id: id,
                version,
            },
        });
    }

    fn record(
        &mut self,
        now: Nanos,
        actor: &str,
        action: &str,
        target: &str,
        change: (String, String),
        reason: &str,
    ) {
        let (before, after) = change;
        self.audit.push(|seq| AuditEntry {
            seq,
            at_ns: now.0,
            actor: actor.to_string(),
            action: action.to_string(),
            target: target.to_string(),
            before,
            after,
            reason: reason.to_string(),
        });
    }
}

impl Machine for AllocatorState {
    type Command = StateCommand;
    type Output = StateOutput;

    fn apply(&mut self, now: Nanos, command: StateCommand) -> StateOutput {
        match command {
            StateCommand::Ledger(Command::Tick) => self.tick(now),
            StateCommand::Ledger(Command::Report(r)) => {
                self.apply_report(now, r, 0, HolderCounts::default())
            }
            StateCommand::Ledger(Command::Release(r)) => {
                self.apply_release(now, r, HolderCounts::default())
            }
            StateCommand::Ledger(Command::Decide(d)) => self.apply_decide(now, d),
            StateCommand::Ledger(Command::Refund(r)) => self.apply_refund(now, r),
            StateCommand::Ledger(c) => StateOutput::Ledger(self.ledger.apply(now, c)),
            StateCommand::ShadowReport { report, would_deny } => {
                self.apply_report(now, report, would_deny, HolderCounts::default())
            }
            StateCommand::CountedReport {
                report,
                would_deny,
                counts,
            } => self.apply_report(now, report, would_deny, counts),
            StateCommand::CountedRelease { release, counts } => {
                self.apply_release(now, release, counts)
            }
            StateCommand::CountedAcquire { acquire, counts } => {
                self.apply_acquire(now, acquire, counts)
            }
            StateCommand::LeaseCalls(calls) => self.apply_lease_calls(now, calls),
            other => self.apply_admin(now, other),
        }
    }

    fn from_earlier_snapshot(format: u8, body: &[u8]) -> Option<Result<(u64, Self), String>> {
        earlier::snapshot(format, body)
    }
}

#[cfg(test)]
mod tests;
