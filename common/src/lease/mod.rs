//! Credit leases: the signed grant that moves credit from a grantor to a holder.
//!
//! A lease is cumulative: a renewal raises `credit`, moves the expiry and bumps
//! `generation`; a return lowers `credit`. Every version is signed again, so the newest
//! signed copy always states exactly how much the holder may have spent in total.

use serde::{Deserialize, Serialize};

/// Identifies a lease within its grantor.
pub type LeaseId = u64;

/// A grant of `credit` units of one policy key to one holder until its expiry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Unique within the grantor (`grantor_id`).
    pub lease_id: LeaseId,
    /// The granting cluster's identity; with `lease_id` it names the lease globally.
    pub grantor_id: String,
    pub policy_id: String,
    /// Version of the policy the credit was granted under.
    pub policy_version: u64,
    /// Canonical policy key (see [`crate::key`]).
    pub key: String,
    pub holder_id: String,
    /// Total units the holder may spend under this lease, over its whole life.
    pub credit: u64,
    /// The grantor's epoch when this version was issued (its Raft term for an allocator).
    pub epoch: u64,
    /// Grantor's replicated time of this version, in nanoseconds of its ledger timeline.
    pub issued_at_ns: u64,
    /// How long this version is valid, measured by the holder from when it *sent* the
    /// request that produced it, shortened by its declared drift.
    pub ttl_ms: u64,
    /// Bumped on every renewal or return, so a stale copy is recognisable.
    pub generation: u64,
    /// For a sub-lease: the upstream lease its credit was carved from.
    pub parent_lease_id: Option<LeaseId>,
    /// Identifier of the signing key, so keys can rotate.
    pub key_id: String,
    /// Ed25519 signature over [`canonical_bytes`](crate::lease::sign::canonical_bytes) of every field above.
    pub signature: Vec<u8>,
}

impl Lease {
    /// Grantor-side expiry on the grantor's ledger timeline.
    pub fn grantor_expiry_ns(&self) -> u64 {
        self.issued_at_ns
            .saturating_add(self.ttl_ms.saturating_mul(1_000_000))
    }
}

pub mod demand;
pub mod holder;
pub mod holder_config;
pub mod sign;

pub use demand::{Demand, DemandMeter};
pub use holder::{HeldLease, LeaseState, RenewalError, SpendError, UsageReport};
pub use holder_config::{wait_after_denial_ms, HolderConfig, HolderConfigError};
pub use sign::{canonical_bytes, LeaseSigner, LeaseVerifier, SignatureError};
