//! Previews of admin changes: what a change would do, computed from the state without
//! changing it, so `--dry-run` answers exactly what the real change would commit.

use super::admin::{delegated_refusal, with_rate};
use super::{AdminError, AllocatorState};
use leasehold_common::policy::Policy;

/// What setting a policy's rate and burst would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RatePreview {
    pub policy_id: String,
    /// Rate of the current version, in milli-units per second; 0 when it has none.
    pub old_rate_milli_per_sec: u64,
    /// Burst of the current version, in units; 0 when it has none.
    pub old_burst: u64,
    pub new_rate_milli_per_sec: u64,
    pub new_burst: u64,
    /// The version the change would create, or the current one when nothing changes.
    pub version: u64,
    pub changed: bool,
    /// Field-by-field changes, one per line; empty when nothing changes.
    pub diff: String,
}

/// A policy's rate in milli-units per second, exactly; 0 without a (valid) rate.
pub fn rate_milli_of(policy: &Policy) -> u64 {
    policy
        .rate
        .and_then(|r| r.to_rate().ok())
        .map_or(0, |r| r.milli_per_sec())
}

impl AllocatorState {
    /// What `SetRate` with these values would do, refused exactly as the change would be.
    pub fn preview_set_rate(
        &self,
        policy_id: &str,
        rate_milli_per_sec: u64,
        burst: u64,
    ) -> Result<RatePreview, AdminError> {
        if self.is_delegated() {
            return Err(delegated_refusal());
        }
        let current = &self
            .policies
            .get(policy_id)
            .ok_or_else(|| AdminError::NotFound(format!("no policy '{policy_id}'")))?
            .policy;
        let proposed = with_rate(current, rate_milli_per_sec, burst);
        // Validated like an apply, so a dry run refuses what the change would refuse.
        proposed
            .validate()
            .map_err(|e| AdminError::Invalid(format!("policy '{policy_id}': {e}")))?;
        let (version, changed, diff) = self.preview(&proposed);
        Ok(RatePreview {
            policy_id: policy_id.to_string(),
            old_rate_milli_per_sec: rate_milli_of(current),
            old_burst: current.burst.unwrap_or(0),
            new_rate_milli_per_sec: rate_milli_of(&proposed),
            new_burst: burst,
            version,
            changed,
            diff,
        })
    }
}
