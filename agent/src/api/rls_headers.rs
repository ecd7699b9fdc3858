//! The rate-limit headers an Envoy response may carry, as envoyproxy/ratelimit adds them
//! when enabled: the IETF draft-03 `RateLimit-Limit`, `RateLimit-Remaining` and
//! `RateLimit-Reset` (seconds) of the descriptor closest to its limit, or of the last
//! descriptor over an ordinary (not `quota_mode`) rule.

use super::rls::{seconds_to_reset, Rule};
use leasehold_common::policy::envoy::EnvoyUnit;
use leasehold_proto::envoy::config::core::v3::HeaderValue;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};

/// The names of the three headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for HeaderNames {
    /// envoyproxy/ratelimit's defaults.
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// The headers for `statuses` (with the rules they were decided under, in order); none
/// when no descriptor had a limit.
pub(super) fn rate_limit_headers(
    names: &HeaderNames,
    statuses: &[DescriptorStatus],
    rules: &[Option<Rule>],
    unix_s: u64,
) -> Vec<HeaderValue> {
    let Some((status, unit)) = pick(statuses, rules) else {
        return Vec::new();
    };
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    vec![
        header(&names.limit, limit.requests_per_unit.to_string()),
        header(&names.remaining, status.limit_remaining.to_string()),
        header(&names.reset, seconds_to_reset(unit, unix_s).to_string()),
    ]
}

/// The descriptor the headers describe: the lowest remaining among those with a limit,
/// overridden by each ordinary descriptor over its limit.
fn pick<'s>(
    statuses: &'s [DescriptorStatus],
    rules: &[Option<Rule>],
) -> Option<(&'s DescriptorStatus, EnvoyUnit)> {
    let mut chosen: Option<(&DescriptorStatus, EnvoyUnit)> = None;
    let mut lowest = u32::MAX;
    for (status, rule) in statuses.iter().zip(rules) {
        let Some((rule, limit)) = rule.as_ref().and_then(|r| Some((r, r.limit?))) else {
            continue;
        };
        if status.limit_remaining < lowest {
            chosen = Some((status, limit.unit));
            lowest = status.limit_remaining;
        }
        if status.code == Code::OverLimit as i32 && !rule.quota_mode {
            chosen = Some((status, limit.unit));
            lowest = 0;
        }
    }
    chosen
}
