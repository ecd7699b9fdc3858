//! envoyproxy/ratelimit limit overrides (a descriptor's `limit`, Envoy's
//! `RateLimitOverride`): each distinct one is a fixed-window policy of this process,
//! installed in the rule set on first use and kept across every later reload, so that its
//! windows keep counting while the same override keeps arriving.

use super::rules::{compile, CompileAs, EngineError, RuleOptions, RuleSet};
use super::Engine;
use leasehold_common::policy::envoy::{
    override_policy, override_policy_id, EnvoyLimit, MapError, Mapped, RuleTemplate,
};
use leasehold_common::policy::Policy;
use thiserror::Error;

/// Most distinct overrides (domain, entry keys, unit and limit) one engine counts. Envoy
/// builds overrides from route configuration, so a fleet uses a handful; the bound keeps
/// requests that invent limits from growing the rule set without end.
pub const ENVOY_OVERRIDES_MAX: usize = 1024;

/// What a descriptor with a limit override is counted under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OverrideRule {
    /// The domain is not loaded: no limit applies, as that service answers.
    UnknownDomain,
    /// A limit of 0: every request is over it.
    AlwaysOverLimit,
    /// The id of the override's policy; a descriptor's entry values go in its dimensions
    /// [`OVERRIDE_DIMENSIONS`](leasehold_common::policy::envoy::OVERRIDE_DIMENSIONS), by
    /// position.
    Policy(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OverrideError {
    #[error(
        "more than {max} distinct limit overrides; the limit in this descriptor is not counted"
    )]
    TooMany { max: usize },
    #[error("limit override: {0}")]
    Map(#[from] MapError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl Engine {
    /// The rule counting `limit` for descriptors of `domain` with entry keys `keys`, in
    /// order; its policy is installed on first use.
    pub fn envoy_override(
        &self,
        domain: &str,
        keys: &[&str],
        limit: EnvoyLimit,
    ) -> Result<OverrideRule, OverrideError> {
        let rules = self.rules.load();
        if !rules.envoy.has_domain(domain) {
            return Ok(OverrideRule::UnknownDomain);
        }
        if limit.requests_per_unit == 0 {
            return Ok(OverrideRule::AlwaysOverLimit);
        }
        let id = override_policy_id(domain, keys, limit);
        if rules.policy(&id).is_none() {
            drop(rules);
            self.install_override(domain, keys, limit)?;
        }
        Ok(OverrideRule::Policy(id))
    }

    #[cold]
    fn install_override(
        &self,
        domain: &str,
        keys: &[&str],
        limit: EnvoyLimit,
    ) -> Result<(), OverrideError> {
        let policy = match override_policy(domain, keys, limit, &RuleTemplate::process())? {
            Mapped::Policy(policy) => *policy,
            Mapped::Unlimited | Mapped::AlwaysOverLimit => unreachable!("a limit above 0"),
        };
        let _guard = self.reload_lock.lock();
        let old = self.rules.load_full();
        if old.policy(&policy.id).is_some() {
            return Ok(());
        }
        if old.overrides.len() >= ENVOY_OVERRIDES_MAX {
            return Err(OverrideError::TooMany {
                max: ENVOY_OVERRIDES_MAX,
            });
        }
        let wall = (self.wall_clock)();
        let mut set = RuleSet::build(old.source.clone(), Some(&old), &self.rule_options, wall)?;
        set.add_override(policy, Some(&old), &self.rule_options)?;
        self.store_rules(set);
        Ok(())
    }
}

impl RuleSet {
    /// Adds the overrides of `old` (reusing their compiled state) to a set being built.
    pub(super) fn keep_overrides(
        &mut self,
        old: Option<&RuleSet>,
        options: &RuleOptions,
    ) -> Result<(), EngineError> {
        for policy in old.map_or(&[][..], |o| &o.overrides[..]) {
            self.add_override(policy.clone(), old, options)?;
        }
        Ok(())
    }

    fn add_override(
        &mut self,
        policy: Policy,
        old: Option<&RuleSet>,
        options: &RuleOptions,
    ) -> Result<(), EngineError> {
        let compiled = compile(
            &policy,
            super::ENVOY_POLICY_VERSION,
            old,
            CompileAs::envoy(options),
        )?;
        self.add(compiled)?;
        self.overrides.push(policy);
        Ok(())
    }
}
