//! Versioned policy registry: every change to a policy is a new numbered version.

use super::diff::{diff, FieldChange};
use super::{FieldErrors, Policy};
use std::collections::btree_map::{BTreeMap, Entry};
use std::collections::VecDeque;
use thiserror::Error;

/// Default most policies held.
pub const POLICIES_MAX_DEFAULT: usize = 10_000;
/// Default most versions kept per policy.
pub const VERSIONS_KEPT_MAX_DEFAULT: usize = 32;

/// Bounds on a [`PolicySet`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicySetLimits {
    /// Most distinct policy ids; applying a new id beyond it is refused.
    pub policies_max: usize,
    /// Most versions kept per policy (at least 1); the oldest are dropped first.
    pub versions_kept_max: usize,
}

impl Default for PolicySetLimits {
    fn default() -> Self {
        PolicySetLimits {
            policies_max: POLICIES_MAX_DEFAULT,
            versions_kept_max: VERSIONS_KEPT_MAX_DEFAULT,
        }
    }
}

/// One numbered version of a policy.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicyVersion {
    /// Starts at 1 and grows by one per change; never reused, even after a rollback.
    pub version: u64,
    #[serde(with = "super::stored")]
    pub policy: Policy,
    /// The version this one restored, when it was made by [`PolicySet::rollback`].
    pub rolled_back_from: Option<u64>,
}

/// What [`PolicySet::apply`] or [`PolicySet::rollback`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The policy's current version afterwards.
    pub version: u64,
    /// False when the document equalled the current version and nothing changed.
    pub changed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PolicySetError {
    #[error("policy '{id}' is invalid: {errors}")]
    Invalid { id: String, errors: FieldErrors },
    #[error("cannot add policy '{id}': already holding the maximum of {max} policies")]
    TooManyPolicies { id: String, max: usize },
    #[error("no policy '{id}'")]
    UnknownPolicy { id: String },
    #[error("policy '{id}' has no version {version} (kept: {oldest} to {newest})")]
    VersionNotKept {
        id: String,
        version: u64,
        oldest: u64,
        newest: u64,
    },
}

/// Every policy's kept versions, by id.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicySet {
    limits: PolicySetLimits,
    policies: BTreeMap<String, VecDeque<PolicyVersion>>,
}

impl PolicySet {
    pub fn new(limits: PolicySetLimits) -> PolicySet {
        let limits = PolicySetLimits {
            versions_kept_max: limits.versions_kept_max.max(1),
            ..limits
        };
        PolicySet {
            limits,
            policies: BTreeMap::new(),
        }
    }

    pub fn limits(&self) -> PolicySetLimits {
        self.limits
    }

    /// Validates `policy` and makes it the current version of its id. A document equal
    /// to the current version creates no new version.
    pub fn apply(&mut self, policy: Policy) -> Result<Applied, PolicySetError> {
        policy
            .validate()
            .map_err(|errors| PolicySetError::Invalid {
                id: policy.id.clone(),
                errors,
            })?;
        self.push(policy, None)
    }

    /// Makes a kept old version current again, as a new version.
    pub fn rollback(&mut self, id: &str, to_version: u64) -> Result<Applied, PolicySetError> {
        let old = self.get_version(id, to_version)?.policy.clone();
        self.push(old, Some(to_version))
    }

    /// The current version of `id`.
    pub fn get(&self, id: &str) -> Option<&PolicyVersion> {
        self.policies.get(id).and_then(|versions| versions.back())
    }

    /// A kept version of `id`.
    pub fn get_version(&self, id: &str, version: u64) -> Result<&PolicyVersion, PolicySetError> {
        let versions = self
            .policies
            .get(id)
            .ok_or_else(|| PolicySetError::UnknownPolicy { id: id.to_owned() })?;
        // Versions are consecutive, so the position follows from the number.
        let oldest = versions.front().map_or(0, |v| v.version);
        let newest = versions.back().map_or(0, |v| v.version);
        version
            .checked_sub(oldest)
            .and_then(|offset| usize::try_from(offset).ok())
            .and_then(|offset| versions.get(offset))
            .ok_or_else(|| PolicySetError::VersionNotKept {
                id: id.to_owned(),
                version,
                oldest,
                newest,
            })
    }

    /// Kept versions of `id`, oldest first.
    pub fn history(&self, id: &str) -> Option<impl Iterator<Item = &PolicyVersion> + '_> {
        self.policies.get(id).map(|versions| versions.iter())
    }

    /// Field changes from version `from` to version `to` of `id`.
    pub fn diff_versions(
        &self,
        id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<FieldChange>, PolicySetError> {
        let old = &self.get_version(id, from)?.policy;
        let new = &self.get_version(id, to)?.policy;
        Ok(diff(old, new))
    }

    /// Current versions of every policy, by id.
    pub fn current(&self) -> impl Iterator<Item = &PolicyVersion> + '_ {
        self.policies
            .values()
            .filter_map(|versions| versions.back())
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    fn push(
        &mut self,
        policy: Policy,
        rolled_back_from: Option<u64>,
    ) -> Result<Applied, PolicySetError> {
        let count = self.policies.len();
        let versions = match self.policies.entry(policy.id.clone()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(_) if count >= self.limits.policies_max => {
                return Err(PolicySetError::TooManyPolicies {
                    id: policy.id,
                    max: self.limits.policies_max,
                });
            }
            Entry::Vacant(e) => e.insert(VecDeque::new()),
        };
        if let Some(current) = versions.back() {
            if current.policy == policy {
                return Ok(Applied {
                    version: current.version,
                    changed: false,
                });
            }
        }
        let version = versions.back().map_or(1, |v| v.version + 1);
        versions.push_back(PolicyVersion {
            version,
            policy,
            rolled_back_from,
        });
        while versions.len() > self.limits.versions_kept_max {
            versions.pop_front();
        }
        Ok(Applied {
            version,
            changed: true,
        })
    }
}
