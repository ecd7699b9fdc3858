//! The commands a ledger applies and what they answer.
//!
//! A command is applied at a time chosen by whoever orders the commands (the Raft leader
//! stamps it into the log entry), never by the replica applying it, so every replica that
//! applies the same commands in the same order reaches the same state.

use super::decide::{Decide, Decided, Refund};
use super::params::PolicyParams;
use crate::lease::{Lease, LeaseId};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// A holder asks for a lease on one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquire {
    pub holder_id: String,
    pub policy_id: String,
    pub key: String,
    pub want_credit: u64,
    /// Measured demand in thousandths of a unit per second (0 = not measured yet).
    pub demand_milli_per_sec: u64,
    /// Increases with every request the holder sends for this key; a retry reuses it.
    pub request_id: u64,
    pub priority: u32,
}

/// A holder reports cumulative usage, may hand credit back, and may ask for more.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub holder_id: String,
    pub lease_id: LeaseId,
    /// Units spent under the lease since it was first granted.
    pub used: u64,
    /// Units handed back over the lease's whole life, this report's included (cumulative,
    /// like `used`, so a lost report's hand-back is carried by the next one). The holder
    /// stopped being able to spend them before sending.
    pub return_credit: u64,
    /// Extra credit wanted; zero renews the expiry only.
    pub want_credit: u64,
    pub demand_milli_per_sec: u64,
    pub request_id: u64,
    pub priority: u32,
}

/// A holder gives a lease up with its final usage; it can never spend it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub holder_id: String,
    pub lease_id: LeaseId,
    pub final_used: u64,
    pub request_id: u64,
}

/// A delegated ledger learnt a new version of its own upstream lease for `key`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamLease {
    pub policy_id: String,
    pub key: String,
    pub upstream_lease_id: LeaseId,
    /// Cumulative credit of the upstream lease, as its newest version states.
    pub credit: u64,
    /// When this ledger must stop sub-leasing it, on this ledger's timeline (the holder-side
    /// deadline of the upstream lease, already shortened for drift).
    pub deadline: Nanos,
    /// Generation of the upstream lease version; `deadline` is taken only from a newer one.
    #[serde(default)]
    pub generation: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Installs or replaces a policy; keys of a replaced policy move to the new version.
    PutPolicy(PolicyParams),
    /// Splits a policy's budget: fair-share weights per holder id (a child allocator or
    /// agent) and optionally a different reserve. Replaces the previous split.
    SetBudget(Budget),
    /// Removes a policy; its keys stop granting, outstanding leases run out normally.
    RemovePolicy {
        policy_id: String,
    },
    Acquire(Acquire),
    Report(Report),
    Release(Release),
    /// An operator revokes a lease: it cannot be renewed; its credit comes back only through
    /// the holder's release or after expiry.
    Revoke {
        lease_id: LeaseId,
    },
    /// Expires leases and upstream credit whose time is up and drops idle state.
    Tick,
    /// The grantor's epoch changed (a new Raft term): new lease versions carry it.
    SetEpoch {
        epoch: u64,
    },
    UpstreamGranted(UpstreamLease),
    /// Takes idle credit out of a delegated key so it can be returned upstream.
    UpstreamReturn {
        key: String,
        units: u64,
    },
    /// Decides one request of exact policies: all its items fit and are spent, or none.
    Decide(Decide),
    /// Gives back what an admitted decision spent (its request was refused elsewhere).
    Refund(Refund),
    /// The upstream lease for `key` is over. `released`: it was released with final usage
    /// `credit - idle`, so the idle credit went back upstream; otherwise it ran out and the
    /// idle credit is lost.
    UpstreamClosed {
        key: String,
        released: bool,
    },
}

/// How a policy's credit is split among the holders that contend for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub policy_id: String,
    /// Weight per holder id; unnamed holders weigh `priority + 1`.
    pub weights: std::collections::BTreeMap<String, u64>,
    /// Replaces the policy's reserve share (parts per million) when set.
    pub reserve_ppm: Option<u64>,
}

/// Why no credit was granted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DenyReason {
    /// The bucket (or upstream credit) has less than the minimum grant.
    Exhausted,
    /// The holder already holds its fair share while others wait.
    FairShare,
    /// Only the emergency reserve is left and the priority is too low for it.
    ReserveOnly,
    /// The holder already holds the most unspent credit a holder may.
    MaxCredit,
}

/// A lease granted or renewed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The lease as it now stands (unsigned: the driver signs it on the way out).
    pub lease: Lease,
    /// Units added by this command.
    pub added: u64,
    /// Set when the lease was under an older policy version: a new lease under the current
    /// version. The holder must stop spending `lease` and release it.
    /// Boxed: a grant is kept in its holder's slot for replaying a retry, and an inline
    /// lease that is nearly always absent doubled what every key kept there.
    pub replacement: Option<Box<Lease>>,
    /// When more credit was asked for and none could be added: how long until asking again
    /// could succeed (0 otherwise).
    #[serde(default)]
    pub retry_after_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Granted(Box<Grant>),
    Denied {
        reason: DenyReason,
        retry_after_ns: u64,
    },
    Released {
        reclaimed: u64,
        stranded: u64,
    },
    Revoked {
        lease_id: LeaseId,
    },
    Ticked {
        expired: u64,
        stranded: u64,
    },
    Decided(Box<Decided>),
    Refunded {
        units: u64,
    },
    Done,
}
