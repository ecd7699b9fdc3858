//! Refusals: commands that would break a promise change nothing and say why.

use crate::lease::LeaseId;
use thiserror::Error;

#[derive(Clone, Debug, Error, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LedgerError {
    #[error("unknown policy '{0}'")]
    UnknownPolicy(String),
    #[error("policy '{policy_id}': version {version} is not newer than {current}")]
    StalePolicyVersion {
        policy_id: String,
        version: u64,
        current: u64,
    },
    #[error("policy '{policy_id}': {reason}")]
    InvalidPolicy { policy_id: String, reason: String },
    #[error("key is empty or longer than {max} bytes")]
    InvalidKey { max: usize },
    #[error("holder id is empty or longer than {max} bytes")]
    InvalidHolder { max: usize },
    #[error("key '{key}' belongs to policy '{owner}', not '{asked}'")]
    KeyPolicyMismatch {
        key: String,
        owner: String,
        asked: String,
    },
    #[error("unknown key '{0}'")]
    UnknownKey(String),
    #[error("unknown lease {0}")]
    UnknownLease(LeaseId),
    #[error("lease {lease_id} is held by another holder")]
    NotHolder { lease_id: LeaseId },
    #[error("lease {lease_id} is {state} and cannot be {action}")]
    LeaseClosed {
        lease_id: LeaseId,
        state: String,
        action: String,
    },
    #[error("lease {lease_id}: usage {used} is below the {reported} already reported")]
    UsageDecreased {
        lease_id: LeaseId,
        used: u64,
        reported: u64,
    },
    #[error("lease {lease_id}: returned total {returned} is below the {known} already returned")]
    ReturnDecreased {
        lease_id: LeaseId,
        returned: u64,
        known: u64,
    },
    #[error("lease {lease_id}: usage {used} plus returned {returned} exceeds credit {credit}")]
    UsageExceedsCredit {
        lease_id: LeaseId,
        used: u64,
        returned: u64,
        credit: u64,
    },
    #[error("request {request_id} is older than the {last} already seen from this holder")]
    StaleRequest { request_id: u64, last: u64 },
    #[error("limit reached: {what} (max {max})")]
    LimitReached { what: String, max: usize },
    #[error("a root ledger has no upstream credit")]
    NotDelegated,
    #[error(
        "key '{key}' already has upstream lease {active}; close it before accepting {offered}"
    )]
    UpstreamLeaseActive {
        key: String,
        active: LeaseId,
        offered: LeaseId,
    },
    #[error("upstream lease {lease_id}: credit {credit} is below the {known} already received")]
    UpstreamCreditDecreased {
        lease_id: LeaseId,
        credit: u64,
        known: u64,
    },
    #[error("policy '{0}' is enforced exactly: it is decided per request and leases no credit")]
    ExactPolicy(String),
    #[error("a decision names {count} items; it must name 1 to {max}")]
    DecideItems { count: usize, max: usize },
    #[error("policy '{0}' is leased, not decided per request (enforcement: exact)")]
    NotExact(String),
    #[error("policy '{policy_id}' is owned at the {owner:?} level; decide it there")]
    NotOwner {
        policy_id: String,
        owner: super::params::Level,
    },
    #[error("key '{key}': only {idle} idle units to return, asked {asked}")]
    NotEnoughIdle { key: String, idle: u64, asked: u64 },
}
