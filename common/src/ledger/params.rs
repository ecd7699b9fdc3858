//! What the ledger needs to know about a policy and about itself.

use crate::rate::Rate;
use serde::{Deserialize, Serialize};

/// Parts per million, the ledger's unit for every fraction.
pub const PPM: u64 = 1_000_000;

/// Lease sizing and lifetime for one policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseParams {
    /// Lifetime of each lease version, measured from its grant.
    pub ttl_ms: u64,
    /// Smallest grant worth sending; smaller remainders are refused as exhausted.
    pub min_credit: u64,
    /// Largest unspent credit one holder may have outstanding.
    pub max_credit: u64,
    /// Share of the key's capacity held back for `reserve_priority_min` and above.
    pub reserve_ppm: u64,
    /// Lowest priority that may draw on the reserve.
    pub reserve_priority_min: u32,
    /// How far ahead a grant should last at the holder's measured demand.
    pub refresh_horizon_ms: u64,
}

impl Default for LeaseParams {
    fn default() -> Self {
        LeaseParams {
            ttl_ms: 10_000,
            min_credit: 1,
            max_credit: 100_000,
            reserve_ppm: 50_000,
            reserve_priority_min: 8,
            refresh_horizon_ms: 2_000,
        }
    }
}

/// One policy as the ledger applies it to each of its keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyParams {
    pub policy_id: String,
    pub version: u64,
    /// Sustained rate of the root bucket (a delegated ledger uses it only for fair share).
    pub rate: Rate,
    /// Largest credit the root bucket stores, leased-out credit included.
    pub burst: u64,
    pub lease: LeaseParams,
    /// Fair-share weight per holder id (a budget split across children); holders not named
    /// weigh `priority + 1`.
    #[serde(default)]
    pub weights: std::collections::BTreeMap<String, u64>,
}

/// Where a ledger's credit comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Owns each key's token bucket.
    Root,
    /// Holds leases from an upstream grantor and sub-leases only that credit.
    Delegated,
}

/// Bounds on everything the ledger stores (P4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLimits {
    pub policies_max: usize,
    pub keys_max: usize,
    pub key_len_max: usize,
    pub holder_id_len_max: usize,
    pub holders_per_key_max: usize,
    pub leases_max: usize,
}

impl Default for LedgerLimits {
    fn default() -> Self {
        LedgerLimits {
            policies_max: 10_000,
            keys_max: 1_000_000,
            key_len_max: 256,
            holder_id_len_max: 128,
            holders_per_key_max: 4_096,
            leases_max: 2_000_000,
        }
    }
}

/// Fixed settings of one ledger (the same on every replica).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerConfig {
    pub grantor_id: String,
    pub role: Role,
    /// Extra time after a lease's expiry before its credit is written off, covering the
    /// grantor's own clock drift and leader hand-over.
    pub expiry_grace_ms: u64,
    pub limits: LedgerLimits,
}

impl LedgerConfig {
    pub fn root(grantor_id: impl Into<String>) -> Self {
        LedgerConfig {
            grantor_id: grantor_id.into(),
            role: Role::Root,
            expiry_grace_ms: 1_000,
            limits: LedgerLimits::default(),
        }
    }

    pub fn delegated(grantor_id: impl Into<String>) -> Self {
        LedgerConfig {
            role: Role::Delegated,
            ..LedgerConfig::root(grantor_id)
        }
    }
}

/// Why a policy cannot be run by the ledger.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseableError {
    #[error("policy '{0}': algorithm {1} is enforced locally and is not leased by an allocator")]
    NotLeased(String, &'static str),
    #[error("policy '{0}': a leased policy needs a rate")]
    NoRate(String),
}

impl PolicyParams {
    /// The ledger's view of version `version` of `policy`. Token-bucket and GCRA policies are
    /// leased; window, calendar and concurrency policies are enforced where they are
    /// evaluated and have no allocator bucket.
    pub fn from_policy(
        policy: &crate::policy::Policy,
        version: u64,
    ) -> Result<PolicyParams, LeaseableError> {
        use crate::policy::Algorithm;
        if !matches!(policy.algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
            return Err(LeaseableError::NotLeased(
                policy.id.clone(),
                policy.algorithm.name(),
            ));
        }
        let spec = policy
            .rate
            .ok_or_else(|| LeaseableError::NoRate(policy.id.clone()))?;
        let rate = spec
            .to_rate()
            .map_err(|_| LeaseableError::NoRate(policy.id.clone()))?;
        let burst = policy.burst().unwrap_or(spec.units).max(1);
        let lp = &policy.lease;
        let priority_min = policy.failure.min_priority.map_or(8, u32::from);
        Ok(PolicyParams {
            policy_id: policy.id.clone(),
            version,
            rate,
            burst,
            lease: LeaseParams {
                ttl_ms: (lp.ttl.as_ns() / 1_000_000).max(1),
                min_credit: lp.min_credit.max(1),
                max_credit: lp.max_credit.unwrap_or(burst).max(lp.min_credit.max(1)),
                reserve_ppm: lp.reserve_fraction.0.min(PPM - 1),
                reserve_priority_min: priority_min,
                refresh_horizon_ms: (lp.refresh_horizon.as_ns() / 1_000_000).max(1),
            },
            weights: Default::default(),
        })
    }
}
