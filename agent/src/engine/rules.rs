//! The rule set: Leasehold policies and envoyproxy/ratelimit rules, compiled for the hot
//! path and swapped whole on reload.

use super::config::EngineLimits;
use super::decision::PolicyId;
use super::domains::DomainDocument;
use super::earn::EarnRate;
use super::fastkey::FastKey;
use super::local::{LocalConfigError, LocalSpec};
use super::policy::{
    is_leased, next_generation, CompiledPolicy, Enforcement, PolicyRuntime, RestrictedSpec,
};
use leasehold_common::key::KeySchema;
use leasehold_common::policy::envoy::{EnvoyConfig, EnvoyError, MapError};
use leasehold_common::policy::{CostUnit, FailureMode, FieldErrors, Mode, Policy, PolicyVersion};
use leasehold_common::time::Nanos;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use thiserror::Error;

/// Version given to policies mapped from a local envoyproxy/ratelimit file, which has none.
pub const ENVOY_POLICY_VERSION: u64 = 1;

/// What an engine enforces.
#[derive(Clone, Debug, Default)]
pub struct RuleSource {
    /// Policy versions. Several versions of one id may be given: the newest one whose
    /// `effective_at` has passed applies; see [`Engine::reload_due`](super::Engine::reload_due).
    /// A domain document (a policy with `ratelimit`) brings its domain's rules, each
    /// enforced as its own policy of the document's version; [`Target::Envoy`] reaches them.
    ///
    /// [`Target::Envoy`]: super::Target::Envoy
    pub policies: Vec<PolicyVersion>,
    /// envoyproxy/ratelimit rules of a local file, reached with
    /// [`Target::Envoy`](super::Target::Envoy) and enforced by this process alone (scope
    /// `process`), as that service does on one host.
    pub envoy: Option<EnvoyConfig>,
}

impl RuleSource {
    /// Current versions of `policies`, numbered 1.
    pub fn from_policies(policies: impl IntoIterator<Item = Policy>) -> Self {
        RuleSource {
            policies: policies
                .into_iter()
                .map(|policy| PolicyVersion {
                    version: 1,
                    policy,
                    rolled_back_from: None,
                })
                .collect(),
            envoy: None,
        }
    }
}

/// Why a rule set or an engine could not be built.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EngineError {
    #[error("policy '{id}' version {version} is invalid: {errors}")]
    InvalidPolicy {
        id: String,
        version: u64,
        errors: FieldErrors,
    },
    #[error("policy '{id}' version {version} is given twice")]
    DuplicateVersion { id: String, version: u64 },
    #[error("policy id '{id}' is used both by a policy and by an envoyproxy/ratelimit rule")]
    IdCollision { id: String },
    #[error(transparent)]
    Local(#[from] LocalConfigError),
    #[error("envoyproxy/ratelimit rule {rule_id}: {error}")]
    EnvoyMap { rule_id: String, error: MapError },
    #[error("envoyproxy/ratelimit domain document '{id}': {error}")]
    Document { id: String, error: EnvoyError },
    #[error(transparent)]
    Envoy(#[from] EnvoyError),
    #[error("engine setting {field}: {reason}")]
    Setting { field: &'static str, reason: String },
    #[error("no policy '{id}' in the current rule set")]
    UnknownPolicy { id: String },
}

/// Hints kept per thread with the rule set they index (a power of two).
const POLICY_HINTS: usize = 16;

/// Longest policy id a hint holds a copy of.
const HINT_ID_MAX: usize = 24;

/// Indexes into one rule set's policies, by a cheap hash of the id: most callers name a
/// few policies over and over, and comparing one id costs less than hashing it fully and
/// probing the map.
#[derive(Clone, Debug, Default)]
pub(crate) struct PolicyHints([Hint; POLICY_HINTS]);

/// A thread's last answer for ids of one length. Short ids are kept here, so the common
/// check reads only the thread's own line instead of following the rule set's pointers
/// to the policy's id.
#[derive(Clone, Debug)]
struct Hint {
    index: u32,
    /// Length of the id in `id`; 0 when it holds none (the id is too long, or unset).
    len: usize,
    id: [u8; HINT_ID_MAX],
}

impl Default for Hint {
    /// No policy: the first lookup misses and fills the hint.
    fn default() -> Self {
        Hint {
            index: u32::MAX,
            len: 0,
            id: [0; HINT_ID_MAX],
        }
    }
}

/// Compiled rules, immutable once built.
#[derive(Debug, Default)]
pub(crate) struct RuleSet {
    pub(crate) policies: Vec<Arc<CompiledPolicy>>,
    by_id: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    /// Every envoyproxy/ratelimit domain: the local file's and the domain documents'.
    pub(crate) envoy: EnvoyConfig,
    /// Envoy rule id → index of its mapped policy.
    pub(super) envoy_rules: HashMap<String, usize, foldhash::fast::RandomState>,
    /// Domain documents in force, by policy id.
    pub(super) documents: HashMap<String, Arc<DomainDocument>>,
    /// Domain document id → indices of its rules' policies.
    pub(super) document_rules: HashMap<String, Vec<usize>>,
    /// The earliest `effective_at` of a version given but not yet in force.
    pub(crate) pending_at: Option<jiff::Timestamp>,
    pub(crate) source: RuleSource,
    /// Whether any policy is decided by the allocator (`enforcement: exact`).
    pub(crate) has_exact: bool,
    /// Limit overrides seen so far, each a policy of this process.
    pub(super) overrides: Vec<Policy>,
}

impl RuleSet {
    #[inline]
    pub(crate) fn policy(&self, id: &str) -> Option<&CompiledPolicy> {
        self.by_id.get(id).map(|&i| &*self.policies[i])
    }

    /// [`policy`](Self::policy), trying the index in `hint` first (a thread's last
    /// answer for ids of this length), and updating it.
    #[inline(always)]
    pub(crate) fn policy_hinted(
        &self,
        id: &str,
        hints: &mut PolicyHints,
    ) -> Option<&CompiledPolicy> {
        let h = &mut hints.0[Self::hint_index_of(id)];
        let hit = match h.id.get(..h.len) {
            Some(held) if h.len > 0 => super::bytes::same_bytes(held, id.as_bytes()),
            // No copy: compare with the policy's own id.
            _ => self
                .policies
                .get(h.index as usize)
                .is_some_and(|p| super::bytes::same(&p.id, id)),
        };
        if hit {
            if let Some(p) = self.policies.get(h.index as usize) {
                return Some(p);
            }
        }
        self.policy_hint_missed(id, h)
    }

    /// The hint slot of `id`: its length and first and last bytes, mixed (ids of one
    /// length alone, such as `tenant` and `leased`, would share one).
    #[inline(always)]
    fn hint_index_of(id: &str) -> usize {
        let b = id.as_bytes();
        let first = usize::from(b.first().copied().unwrap_or(0));
        let last = usize::from(b.last().copied().unwrap_or(0));
        (first ^ (last << 1) ^ b.len()) % POLICY_HINTS
    }

    #[cold]
    fn policy_hint_missed(&self, id: &str, h: &mut Hint) -> Option<&CompiledPolicy> {
        let i = *self.by_id.get(id)?;
        h.index = u32::try_from(i).unwrap_or(u32::MAX);
        match h.id.get_mut(..id.len()) {
            Some(held) => {
                held.copy_from_slice(id.as_bytes());
                h.len = id.len();
            }
            None => h.len = 0,
        }
        Some(&self.policies[i])
    }

    #[inline]
    pub(crate) fn envoy_policy(&self, rule_id: &str) -> Option<&CompiledPolicy> {
        self.envoy_rules.get(rule_id).map(|&i| &*self.policies[i])
    }

    /// Compiles `source` at wall time `wall`, reusing from `old` every policy that did not
    /// change (so its keys keep their state) and the counters and emergency of every id.
    pub(crate) fn build(
        source: RuleSource,
        old: Option<&RuleSet>,
        options: &RuleOptions,
        wall: jiff::Timestamp,
    ) -> Result<RuleSet, EngineError> {
        let (chosen, pending_at) = choose_versions(&source.policies, wall)?;
        let mut set = RuleSet {
            pending_at,
            ..RuleSet::default()
        };
        for pv in chosen {
            if pv.policy.ratelimit.is_some() {
                set.add_document(pv, old, CompileAs::envoy(options))?;
            } else {
                let keys = CompileAs::policies(options);
                set.add(compile(&pv.policy, pv.version, old, keys)?)?;
            }
        }
        if let Some(envoy) = &source.envoy {
            set.add_local_envoy(envoy, old, CompileAs::envoy(options))?;
        }
        set.keep_overrides(old, options)?;
        set.source = source;
        Ok(set)
    }

    /// The policies a domain document's rules became; `None` for any other id.
    pub(crate) fn document_policies(
        &self,
        id: &str,
    ) -> Option<impl Iterator<Item = &CompiledPolicy> + '_> {
        let indices = self.document_rules.get(id)?;
        Some(indices.iter().map(|&i| &*self.policies[i]))
    }

    pub(super) fn add(&mut self, compiled: Arc<CompiledPolicy>) -> Result<usize, EngineError> {
        let index = self.policies.len();
        if self.by_id.insert(Arc::clone(&compiled.id), index).is_some() {
            return Err(EngineError::IdCollision {
                id: compiled.id.to_string(),
            });
        }
        self.has_exact |= matches!(compiled.enforcement, Enforcement::Exact);
        self.policies.push(compiled);
        Ok(index)
    }
}

/// Per id, the newest version in force at `wall`; and the earliest pending start.
fn choose_versions(
    versions: &[PolicyVersion],
    wall: jiff::Timestamp,
) -> Result<(Vec<&PolicyVersion>, Option<jiff::Timestamp>), EngineError> {
    let mut best: HashMap<&str, &PolicyVersion> = HashMap::new();
    let mut seen: HashMap<(&str, u64), ()> = HashMap::new();
    let mut pending_at: Option<jiff::Timestamp> = None;
    for pv in versions {
        let id = pv.policy.id.as_str();
        if seen.insert((id, pv.version), ()).is_some() {
            return Err(EngineError::DuplicateVersion {
                id: id.to_owned(),
                version: pv.version,
            });
        }
        match pv.policy.effective_at {
            Some(at) if at > wall => {
                pending_at = Some(pending_at.map_or(at, |p| p.min(at)));
                continue;
            }
            _ => {}
        }
        let newer = best.get(id).is_none_or(|b| b.version < pv.version);
        if newer {
            best.insert(id, pv);
        }
    }
    // Input order, so the compiled order (and error reports) are deterministic.
    let chosen = versions
        .iter()
        .filter(|pv| {
            best.get(pv.policy.id.as_str())
                .is_some_and(|b| std::ptr::eq(*b, *pv))
        })
        .collect();
    Ok((chosen, pending_at))
}

/// Settings every rule set of one engine is built with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct RuleOptions {
    pub(crate) key_len_max: usize,
    pub(crate) envoy_key_len_max: usize,
    /// envoyproxy/ratelimit rules count refused hits too, as that service does.
    pub(crate) envoy_count_denied: bool,
}

impl RuleOptions {
    pub(crate) fn new(limits: &EngineLimits, envoy_count_denied: bool) -> RuleOptions {
        RuleOptions {
            key_len_max: limits.key_len_max,
            envoy_key_len_max: limits.envoy_key_len_max,
            envoy_count_denied,
        }
    }
}

/// How one kind of rule is compiled: how its keys are built and its windows count.
#[derive(Copy, Clone, Debug)]
pub(super) struct CompileAs {
    key_len_max: usize,
    /// Values keyed as given.
    verbatim: bool,
    /// Windows count refused hits too.
    count_denied: bool,
}

impl CompileAs {
    /// Leasehold policies: values canonicalised, refused requests charge nothing.
    pub(super) fn policies(options: &RuleOptions) -> CompileAs {
        CompileAs {
            key_len_max: options.key_len_max,
            verbatim: false,
            count_denied: false,
        }
    }

    /// envoyproxy/ratelimit rules: values keyed as given and windows counting as that
    /// service's do.
    pub(super) fn envoy(options: &RuleOptions) -> CompileAs {
        CompileAs {
            key_len_max: options.envoy_key_len_max,
            verbatim: true,
            count_denied: options.envoy_count_denied,
        }
    }
}

pub(super) fn compile(
    policy: &Policy,
    version: u64,
    old: Option<&RuleSet>,
    keys: CompileAs,
) -> Result<Arc<CompiledPolicy>, EngineError> {
    let previous = old.and_then(|o| o.by_id.get(policy.id.as_str()).map(|&i| &o.policies[i]));
    if let Some(prev) = previous {
        if prev.version == version && prev.policy == *policy {
            return Ok(Arc::clone(prev));
        }
    }
    let invalid = |errors| EngineError::InvalidPolicy {
        id: policy.id.clone(),
        version,
        errors,
    };
    let schema = KeySchema::new(policy)
        .map_err(invalid)?
        .with_key_len_max(keys.key_len_max);
    let schema = if keys.verbatim {
        schema.verbatim()
    } else {
        schema
    };
    let enforcement = if policy.enforcement == leasehold_common::policy::Enforcement::Exact {
        Enforcement::Exact
    } else if is_leased(policy) {
        Enforcement::Leased
    } else {
        match LocalSpec::of(policy)? {
            Some(spec) if keys.count_denied => Enforcement::Local(spec.counting_denied()),
            Some(spec) => Enforcement::Local(spec),
            None => Enforcement::Concurrency {
                max_in_flight: policy.concurrency.map_or(1, |c| c.max_in_flight),
            },
        }
    };
    let restricted = match (policy.failure.min_priority, policy.failure.rate) {
        (Some(min_priority), Some(spec)) if policy.failure.mode == FailureMode::Restricted => {
            let rate = spec.to_rate().map_err(|e| LocalConfigError::Invalid {
                policy: policy.id.clone(),
                field: "failure.rate",
                reason: e.to_string(),
            })?;
            Some(RestrictedSpec { min_priority, rate })
        }
        _ => None,
    };
    let id = previous.map_or_else(|| Arc::from(policy.id.as_str()), |p| Arc::clone(&p.id));
    let request_cost = (policy.cost.unit == CostUnit::Request).then_some(policy.cost.default);
    let rate = policy
        .rate
        .and_then(|r| r.to_rate().ok())
        .map(EarnRate::new);
    let compiled = CompiledPolicy {
        pid: PolicyId::new(&id),
        id,
        version,
        generation: next_generation(),
        fast_key: FastKey::new(policy, &schema),
        schema,
        enforcement,
        capacity: policy.capacity().unwrap_or(0),
        request_cost,
        request_earn_ns: match (request_cost, rate) {
            (Some(cost), Some(rate)) => rate.ns_until(cost),
            _ => 0,
        },
        rate,
        failure: policy.failure.mode,
        restricted,
        shadow: policy.mode == Mode::Shadow,
        max_delay_ns: match policy.shape {
            Some(shape) if policy.mode != Mode::Shadow => shape.max_delay.as_ns(),
            _ => 0,
        },
        runtime: previous.map_or_else(
            || Arc::new(PolicyRuntime::default()),
            |p| Arc::clone(&p.runtime),
        ),
        overflow: OnceLock::new(),
        policy: policy.clone(),
    };
    // A leased overflow key keeps its slot across versions, like every other leased key.
    // Overflow entries live outside the key table, so their last-use time is irrelevant.
    if let Some(stale) = previous.and_then(|p| p.overflow.get()) {
        if compiled.is_leased() && previous.is_some_and(|p| p.is_leased()) {
            let entry = compiled.new_overflow(Some(stale), Nanos::ZERO);
            let _ = compiled.overflow.set(Arc::new(entry));
        }
    }
    Ok(Arc::new(compiled))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(id: &str) -> Policy {
        Policy::from_yaml(&format!(
            "id: {id}\ndimensions: [{{name: tenant}}]\nrate: {{units: 1, per: 1s}}\nburst: 1\n"
        ))
        .unwrap()
    }

    /// Lookups through one thread's hints always answer the policy named, whichever ids
    /// share a hint slot, however long the ids, and in any order.
    #[test]
    fn hinted_lookups_answer_the_policy_named() {
        let long = "a-policy-id-longer-than-a-hint-holds";
        let ids = ["leased", "tenant", "route", "x", long, "tenanu", "le-sed"];
        let source = RuleSource::from_policies(ids.map(policy));
        let rules = RuleSet::build(
            source,
            None,
            &RuleOptions::new(&EngineLimits::default(), true),
            jiff::Timestamp::now(),
        )
        .unwrap();
        let mut hints = PolicyHints::default();
        for round in 0..3 {
            for (i, id) in ids.iter().enumerate().cycle().skip(round).take(20) {
                let found = rules.policy_hinted(id, &mut hints).map(|p| &*p.id);
                assert_eq!(found, Some(*id), "lookup {i} of round {round}");
            }
            assert!(rules.policy_hinted("absent", &mut hints).is_none());
            assert!(rules.policy_hinted("", &mut hints).is_none());
        }
    }

    /// The retry hint worked out once for a request's cost is the one the rate gives.
    #[test]
    fn a_request_costs_the_time_its_rate_takes_to_earn_it() {
        for (rate, cost) in [("{units: 3, per: 1s}", 2), ("{units: 7, per: 1h}", 1)] {
            let yaml = format!(
                "id: p\ndimensions: [{{name: tenant}}]\nrate: {rate}\nburst: 9\n\
                 cost: {{unit: request, default: {cost}}}\n"
            );
            let source = RuleSource::from_policies([Policy::from_yaml(&yaml).unwrap()]);
            let rules = RuleSet::build(
                source,
                None,
                &RuleOptions::new(&EngineLimits::default(), true),
                jiff::Timestamp::now(),
            )
            .unwrap();
            let p = rules.policy("p").unwrap();
            let per = p.policy.rate.unwrap().to_rate().unwrap();
            let by_rate = |units| per.ns_until(units, 0);
            assert_eq!(p.request_cost, Some(cost));
            assert_eq!(p.retry_after_ns(cost), by_rate(cost), "{rate}");
            assert_eq!(p.retry_after_ns(cost + 1), by_rate(cost + 1), "{rate}");
            assert_eq!(p.retry_after_ns(0), 0);
        }
    }

    /// The ids most rule sets name together do not evict each other's hints.
    #[test]
    fn ids_of_one_length_get_their_own_hints() {
        let slots = ["leased", "tenant", "route"].map(RuleSet::hint_index_of);
        assert_ne!(slots[0], slots[1]);
        assert_ne!(slots[0], slots[2]);
        assert_ne!(slots[1], slots[2]);
    }
}
