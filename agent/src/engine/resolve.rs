//! What each dimension of a request resolves to (a policy, an Envoy rule's answer, or no
//! rule) before anything is charged.

use super::policy::CompiledPolicy;
use super::request::{Dimension, Target};
use super::rules::{PolicyHints, RuleSet};
use leasehold_common::policy::envoy::MatchedRule;

const LIMIT: usize = super::DIMENSIONS_LIMIT;

/// What one dimension resolved to.
#[derive(Copy, Clone)]
pub(crate) enum Resolved<'r> {
    NoRule,
    UnknownPolicy,
    Unlimited,
    ZeroLimit { shadow: bool },
    Policy(&'r CompiledPolicy),
    Replaced(&'r CompiledPolicy),
}

impl<'r> Resolved<'r> {
    pub(crate) fn policy(self) -> Option<&'r CompiledPolicy> {
        match self {
            Resolved::Policy(p) | Resolved::Replaced(p) => Some(p),
            _ => None,
        }
    }

    fn kind(self) -> Kind {
        match self {
            Resolved::NoRule => Kind::NoRule,
            Resolved::UnknownPolicy => Kind::UnknownPolicy,
            Resolved::Unlimited => Kind::Unlimited,
            Resolved::ZeroLimit { shadow: false } => Kind::ZeroLimit,
            Resolved::ZeroLimit { shadow: true } => Kind::ZeroLimitShadow,
            Resolved::Policy(_) => Kind::Policy,
            Resolved::Replaced(_) => Kind::Replaced,
        }
    }
}

/// [`Resolved`] without its policy.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Kind {
    NoRule,
    UnknownPolicy,
    Unlimited,
    ZeroLimit,
    ZeroLimitShadow,
    Policy,
    Replaced,
}

/// Inline for policy ids: returned from a call, the resolution is read back in pieces
/// other than those it was written in, and the read waits.
#[inline]
pub(crate) fn resolve<'r>(
    rules: &'r RuleSet,
    dim: &Dimension<'_>,
    hints: &mut PolicyHints,
) -> (Resolved<'r>, Option<&'r MatchedRule>) {
    match dim.target {
        Target::Policy(id) => match rules.policy_hinted(id, hints) {
            Some(p) => (Resolved::Policy(p), None),
            None => (Resolved::UnknownPolicy, None),
        },
        Target::Envoy { domain } => resolve_envoy(rules, domain, dim),
    }
}

fn resolve_envoy<'r>(
    rules: &'r RuleSet,
    domain: &str,
    dim: &Dimension<'_>,
) -> (Resolved<'r>, Option<&'r MatchedRule>) {
    let Some(rule) = rules.envoy.lookup(domain, dim.entries) else {
        return (Resolved::NoRule, None);
    };
    let resolved = if rule.unlimited {
        Resolved::Unlimited
    } else if rule.limit.is_none_or(|l| l.requests_per_unit == 0) {
        Resolved::ZeroLimit {
            shadow: rule.shadow_mode,
        }
    } else {
        rules
            .envoy_policy(&rule.rule_id)
            .map_or(Resolved::NoRule, Resolved::Policy)
    };
    (resolved, Some(rule))
}

/// The resolutions of a request's dimensions, in order. Kinds and policies are kept apart:
/// pushed as one value, a resolution is assembled on the stack and copied in with one wide
/// read of pieces just stored, and that read waits for them (a store-forwarding stall that
/// cost a tenth of a three-dimension decision). Plain arrays: the engine refuses requests
/// of more dimensions before planning, and a growable vector checked its capacity on every
/// push and read.
pub(crate) struct Plan<'r> {
    kinds: [Kind; LIMIT],
    policies: [Option<&'r CompiledPolicy>; LIMIT],
}

impl<'r> Plan<'r> {
    /// A plan of no dimensions, to [`fill`](Self::fill) where it stays: a plan filled and
    /// then moved is copied in wide reads of the kinds just stored one by one, and those
    /// reads wait for the stores.
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Plan {
            kinds: [Kind::NoRule; LIMIT],
            policies: [None; LIMIT],
        }
    }

    /// Resolves every dimension (at most [`DIMENSIONS_LIMIT`](super::DIMENSIONS_LIMIT);
    /// more panic); a rule named in another matched rule's `replaces` is not applied to
    /// this request.
    #[inline(always)]
    pub(crate) fn fill(
        &mut self,
        rules: &'r RuleSet,
        dims: &[Dimension<'_>],
        hints: &mut PolicyHints,
    ) {
        let mut matched: [Option<&MatchedRule>; LIMIT] = [None; LIMIT];
        let mut replacing = false;
        for (i, d) in dims.iter().enumerate() {
            let (res, rule) = resolve(rules, d, hints);
            self.kinds[i] = res.kind();
            self.policies[i] = res.policy();
            replacing |= rule.is_some_and(|r| !r.replaces.is_empty());
            matched[i] = rule;
        }
        if replacing {
            self.apply_replaces(&matched[..dims.len()]);
        }
    }

    /// `matched[i]`: the rule dimension `i` matched, if any (one of them replacing others).
    #[cold]
    fn apply_replaces(&mut self, matched: &[Option<&MatchedRule>]) {
        for (i, (kind, &rule)) in self.kinds.iter_mut().zip(matched).enumerate() {
            let (Kind::Policy, Some(rule)) = (*kind, rule) else {
                continue;
            };
            let Some(name) = rule.name.as_deref() else {
                continue;
            };
            let replaced = matched.iter().enumerate().any(|(j, other)| {
                j != i && other.is_some_and(|o| o.replaces.iter().any(|n| n == name))
            });
            if replaced {
                *kind = Kind::Replaced;
            }
        }
    }

    /// Dimension `i`'s resolution.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Resolved<'r> {
        match (self.kinds[i], self.policies[i]) {
            (Kind::Policy, Some(p)) => Resolved::Policy(p),
            (Kind::Replaced, Some(p)) => Resolved::Replaced(p),
            (Kind::Unlimited, _) => Resolved::Unlimited,
            (Kind::ZeroLimit, _) => Resolved::ZeroLimit { shadow: false },
            (Kind::ZeroLimitShadow, _) => Resolved::ZeroLimit { shadow: true },
            (Kind::UnknownPolicy, _) => Resolved::UnknownPolicy,
            // Policy kinds are stored with their policy (`Resolved::policy`), so this is
            // only ever a resolution to no rule.
            (Kind::NoRule | Kind::Policy | Kind::Replaced, _) => Resolved::NoRule,
        }
    }

    /// Dimension `i`'s policy if it is to be applied (not replaced): the common case,
    /// without building the whole resolution.
    #[inline(always)]
    pub(crate) fn applied(&self, i: usize) -> Option<&'r CompiledPolicy> {
        match self.kinds[i] {
            Kind::Policy => self.policies[i],
            _ => None,
        }
    }

    /// Dimension `i`'s policy, applied or replaced.
    #[inline(always)]
    pub(crate) fn policy(&self, i: usize) -> Option<&'r CompiledPolicy> {
        self.policies[i]
    }
}
