//! A descriptor's `limit` (Envoy's `RateLimitOverride`), answered as envoyproxy/ratelimit
//! does: in a loaded domain it is the descriptor's limit whatever rule the entries match,
//! with no name, never in shadow mode, replacing and replaced by nothing; in an unknown
//! domain nothing limits the descriptor. It is counted per descriptor value by this
//! process ([`Engine::envoy_override`]).

use super::rls::{Entries, Rule};
use crate::engine::{Engine, OverrideError, OverrideRule};
use leasehold_common::policy::envoy::{EnvoyLimit, EnvoyUnit, OVERRIDE_DIMENSIONS};
use leasehold_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use leasehold_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use tonic::Status;

/// The rule descriptor `index` of a request is answered under, given its override.
pub(super) fn override_rule(
    engine: &Engine,
    domain: &str,
    index: usize,
    d: &RateLimitDescriptor,
    limit: &RateLimitOverride,
) -> Result<Option<Rule>, Status> {
    let unit = override_unit(limit.unit).ok_or_else(|| {
        Status::invalid_argument(format!(
            "descriptor {index}: limit override unit {} is not one of SECOND (1) to WEEK (7)",
            limit.unit
        ))
    })?;
    let limit = EnvoyLimit {
        requests_per_unit: limit.requests_per_unit,
        unit,
    };
    let keys: Vec<&str> = d.entries.iter().map(|e| e.key.as_str()).collect();
    let overridden = match engine.envoy_override(domain, &keys, limit) {
        Ok(OverrideRule::UnknownDomain) => return Ok(None),
        Ok(rule) => rule,
        Err(e @ OverrideError::TooMany { .. }) => {
            return Err(Status::resource_exhausted(format!(
                "descriptor {index}: {e}"
            )))
        }
        Err(e) => return Err(Status::invalid_argument(format!("descriptor {index}: {e}"))),
    };
    Ok(Some(Rule {
        name: None,
        limit: Some(limit),
        unlimited: false,
        quota_mode: false,
        overridden: Some(overridden),
    }))
}

/// The unit of an override: the numbering of the response's `RateLimit.Unit`, which that
/// service casts the descriptor's unit to (so 7 is a week).
fn override_unit(unit: i32) -> Option<EnvoyUnit> {
    Some(match unit {
        1 => EnvoyUnit::Second,
        2 => EnvoyUnit::Minute,
        3 => EnvoyUnit::Hour,
        4 => EnvoyUnit::Day,
        5 => EnvoyUnit::Month,
        6 => EnvoyUnit::Year,
        7 => EnvoyUnit::Week,
        _ => return None,
    })
}

/// The descriptor's values under the override policy's positional dimension names.
pub(super) fn positional_entries<'a>(entries: &[(&'a str, &'a str)]) -> Entries<'a> {
    entries
        .iter()
        .zip(OVERRIDE_DIMENSIONS)
        .map(|(&(_, value), name)| (name, value))
        .collect()
}

/// A limit of 0: over it, with nothing remaining.
pub(super) fn over_limit_status(rule: &Rule, unix_s: u64) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::OverLimit as i32,
        current_limit: rule.current_limit(),
        limit_remaining: 0,
        duration_until_reset: rule.duration_until_reset(unix_s),
        quota: None,
    }
}
