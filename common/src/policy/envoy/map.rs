//! Each limited rule as a Leasehold policy.
//!
//! The policy keys on the rule's *varying* path parts: a key-only step and a wildcard step
//! without `share_threshold` count each value apart, as that service does. A step with a
//! fixed value, or a wildcard with `share_threshold`, is the same for every request the
//! rule matches, so it is left out of the key.
//!
//! What a rule does not say (where its budget lives, what happens while the allocator is
//! away) comes from a [`RuleTemplate`]: rules read by one agent from a local file are
//! enforced by that process alone, rules stored at the allocator are shared by the fleet.

use super::tree::{DomainTree, Segment, SegmentValue};
use super::{EnvoyLimit, MatchedRule};
use crate::policy::{
    is_valid_dimension_name, Algorithm, Cost, Dimension, Failure, FieldErrors, HumanDuration,
    LeaseParams, Mode, Policy, Ppm, RateSpec, Scope, DIMENSIONS_MAX, DIMENSION_VALUE_LEN_LIMIT,
};
use ring::digest;
use thiserror::Error;

/// Hex digits of the rule-id digest in a derived policy id.
const ID_HASH_HEX_LEN: usize = 12;
const ID_PREFIX: &str = "envoy-";

/// The fields every policy mapped from a domain's rules shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleTemplate {
    pub scope: Scope,
    /// Every rule in shadow mode, whatever its own `shadow_mode`.
    pub shadow: bool,
    pub kill_switch: bool,
    pub failure: Failure,
    pub lease: LeaseParams,
}

impl RuleTemplate {
    /// Rules one agent enforces alone, from its own configuration file, as that service
    /// does on one host.
    pub fn process() -> RuleTemplate {
        RuleTemplate {
            scope: Scope::Process,
            shadow: false,
            kill_switch: false,
            failure: Failure::default(),
            lease: LeaseParams::default(),
        }
    }

    /// Rules whose budgets the allocator at `scope` owns, leased to every agent. Nothing is
    /// held back as a reserve: a rule allows exactly its `requests_per_unit`, as that
    /// service's shared counter does.
    pub fn shared(scope: Scope) -> RuleTemplate {
        RuleTemplate {
            scope,
            lease: LeaseParams {
                reserve_fraction: Ppm(0),
                ..LeaseParams::default()
            },
            ..RuleTemplate::process()
        }
    }
}

/// One rule with a `rate_limit`, and what it became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedRule {
    pub rule_id: String,
    /// Where the rule is in its file: `descriptors[0].descriptors[2]`.
    pub at: String,
    pub mapped: Result<Mapped, MapError>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapped {
    /// A limited rule.
    Policy(Box<Policy>),
    /// `unlimited: true`: never limited, so no policy.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit. No rate can express it.
    AlwaysOverLimit,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MapError {
    #[error("descriptor key '{key}' appears twice in the rule's varying path")]
    RepeatedKey { key: String },
    #[error("descriptor key '{key}' cannot be a dimension name (use A-Z a-z 0-9 _ . -)")]
    BadKey { key: String },
    #[error("{found} varying descriptor keys, at most {max}")]
    TooManyDimensions { found: usize, max: usize },
    #[error("the mapped policy is invalid: {0}")]
    Invalid(FieldErrors),
}

pub(super) fn map_domain(tree: &DomainTree, template: &RuleTemplate) -> Vec<MappedRule> {
    tree.nodes()
        .iter()
        .filter_map(|node| {
            let rule = node.rule.as_ref()?;
            Some(MappedRule {
                rule_id: rule.rule_id.clone(),
                at: node.at.clone(),
                mapped: map_rule(rule, &node.path, template),
            })
        })
        .collect()
}

fn map_rule(
    rule: &MatchedRule,
    path: &[Segment],
    template: &RuleTemplate,
) -> Result<Mapped, MapError> {
    let limit = match rule.limit {
        _ if rule.unlimited => return Ok(Mapped::Unlimited),
        Some(EnvoyLimit {
            requests_per_unit: 0,
            ..
        })
        | None => return Ok(Mapped::AlwaysOverLimit),
        Some(limit) => limit,
    };
    let dimensions = dimensions(path)?;
    let mut description = format!("envoyproxy/ratelimit rule {}", rule.rule_id);
    if let Some(name) = &rule.name {
        description.push_str(&format!(" ({name})"));
    }
    let id = policy_id(&rule.domain, path, &rule.rule_id);
    let shadow = rule.shadow_mode || template.shadow;
    window_policy(id, description, dimensions, limit, shadow, template)
}

/// A fixed window of `limit` keyed on `dimensions`, as every limited rule becomes.
pub(super) fn window_policy(
    id: String,
    description: String,
    dimensions: Vec<Dimension>,
    limit: EnvoyLimit,
    shadow: bool,
    template: &RuleTemplate,
) -> Result<Mapped, MapError> {
    let policy = Policy {
        id,
        description,
        dimensions,
        key: Vec::new(),
        cost: Cost::default(),
        algorithm: Algorithm::FixedWindow,
        rate: Some(RateSpec {
            units: u64::from(limit.requests_per_unit),
            per: HumanDuration::from_secs(limit.unit.seconds()),
        }),
        burst: None,
        calendar: None,
        concurrency: None,
        shape: None,
        scope: template.scope,
        enforcement: Default::default(),
        failure: template.failure.clone(),
        mode: if shadow { Mode::Shadow } else { Mode::Enforce },
        effective_at: None,
        kill_switch: template.kill_switch,
        lease: template.lease.clone(),
        priority_classes: Vec::new(),
        ratelimit: None,
    };
    policy.validate().map_err(MapError::Invalid)?;
    Ok(Mapped::Policy(Box::new(policy)))
}

/// A dimension of a rule's key: required, its value taken as given.
pub(super) fn verbatim_dimension(name: String) -> Dimension {
    Dimension {
        name,
        required: true,
        lowercase: false,
        max_len: DIMENSION_VALUE_LEN_LIMIT,
        overflow: false,
        values: Vec::new(),
    }
}

fn dimensions(path: &[Segment]) -> Result<Vec<Dimension>, MapError> {
    let mut dims: Vec<Dimension> = Vec::new();
    for segment in path {
        let varies = match segment.value {
            SegmentValue::Any => true,
            SegmentValue::Wildcard(_) => !segment.share_threshold,
            SegmentValue::Exact(_) => false,
        };
        if !varies {
            continue;
        }
        let key = segment.key.clone();
        if !is_valid_dimension_name(&key) {
            return Err(MapError::BadKey { key });
        }
        if dims.iter().any(|d| d.name == key) {
            return Err(MapError::RepeatedKey { key });
        }
        dims.push(verbatim_dimension(key));
    }
    if dims.len() > DIMENSIONS_MAX {
        return Err(MapError::TooManyDimensions {
            found: dims.len(),
            max: DIMENSIONS_MAX,
        });
    }
    Ok(dims)
}

/// `envoy-<readable slug>-<digest>`: the slug (domain and keys) helps people, the SHA-256
/// of the rule id makes the id unique and stable across loads and machines.
fn policy_id(domain: &str, path: &[Segment], rule_id: &str) -> String {
    let slug_len_max = crate::policy::POLICY_ID_LEN_MAX - ID_PREFIX.len() - 1 - ID_HASH_HEX_LEN;
    let mut slug = String::new();
    let words = std::iter::once(domain).chain(path.iter().map(|s| s.key.as_str()));
    for word in words {
        for c in word.chars() {
            let c = c.to_ascii_lowercase();
            let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            };
            if !(c == '-' && (slug.is_empty() || slug.ends_with('-'))) {
                slug.push(c);
            }
        }
        if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.truncate(slug_len_max);
    let digest = digest::digest(&digest::SHA256, rule_id.as_bytes());
    let mut id = String::from(ID_PREFIX);
    id.push_str(&slug);
    if !id.ends_with('-') {
        id.push('-');
    }
    for byte in &digest.as_ref()[..ID_HASH_HEX_LEN / 2] {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}
