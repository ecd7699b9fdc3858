//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`), wire-compatible,
//! answering as envoyproxy/ratelimit does for its own configuration.
//!
//! Every descriptor is evaluated on its own (a descriptor that is over its limit does not
//! undo the others) and `statuses` follows the request's order. The overall code is
//! OVER_LIMIT when a descriptor of an ordinary rule is, or when every descriptor of a
//! `quota_mode` rule is. A rule named in another matched rule's `replaces` is not applied.
//! `hits_addend` on a descriptor overrides the request's; there 0 checks without charging,
//! while the request's 0 counts as 1. `duration_until_reset` is the whole seconds to the end
//! of the rule's unit on UNIX time. An empty domain or descriptor list is an error.
//!
//! A descriptor's `limit` (Envoy's `RateLimitOverride`) in a loaded domain is the limit
//! applied, whatever rule its entries match ([`super::rls_override`]).
//!
//! The domains are the engine's: a local file's, or the domain documents the allocator
//! pushes, so a domain applied or changed with `leasectl` is answered without a restart.

use super::rls_headers::{rate_limit_headers, HeaderNames};
use super::rls_override::{over_limit_status, override_rule, positional_entries};
use crate::engine::{AdmitRequest, Dimension, Engine, Outcome, OverrideRule};
use leasehold_common::policy::envoy::{EnvoyLimit, EnvoyUnit, MatchedRule};
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use leasehold_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use smallvec::SmallVec;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Entries of a descriptor viewed without a heap allocation; Envoy descriptors rarely have
/// more than a handful.
const ENTRIES_INLINE: usize = 4;

/// `server` as a gRPC service that refuses messages over
/// [`GRPC_MESSAGE_LEN_MAX`](super::listen::GRPC_MESSAGE_LEN_MAX) before buffering them:
/// that bound, not a count, limits how many descriptors and entries one request carries.
pub fn rls_service(server: RlsServer) -> RateLimitServiceServer<RlsServer> {
    RateLimitServiceServer::new(server)
        .max_decoding_message_size(super::listen::GRPC_MESSAGE_LEN_MAX)
}

pub struct RlsServer {
    engine: Arc<Engine>,
    clock: SystemClock,
    /// Add `RateLimit-Limit`, `-Remaining` and `-Reset` response headers, as
    /// envoyproxy/ratelimit does when enabled.
    headers: Option<HeaderNames>,
}

impl RlsServer {
    pub fn new(engine: Arc<Engine>, clock: SystemClock, headers: bool) -> Self {
        RlsServer {
            engine,
            clock,
            headers: headers.then(HeaderNames::default),
        }
    }
}

/// What a descriptor's matched rule says, copied out of the rule set.
pub(super) struct Rule {
    pub(super) name: Option<String>,
    pub(super) limit: Option<EnvoyLimit>,
    pub(super) unlimited: bool,
    pub(super) quota_mode: bool,
    /// A limit override, counted in place of the matched rule.
    pub(super) overridden: Option<OverrideRule>,
}

impl Rule {
    fn of(m: &MatchedRule) -> Rule {
        Rule {
            name: m.name.clone(),
            limit: m.limit,
            unlimited: m.unlimited,
            quota_mode: m.quota_mode,
            overridden: None,
        }
    }

    pub(super) fn current_limit(&self) -> Option<RateLimit> {
        self.limit.map(|l| RateLimit {
            name: self.name.clone().unwrap_or_default(),
            requests_per_unit: l.requests_per_unit,
            unit: unit(l.unit) as i32,
        })
    }
}

pub(super) fn unit(u: EnvoyUnit) -> Unit {
    match u {
        EnvoyUnit::Second => Unit::Second,
        EnvoyUnit::Minute => Unit::Minute,
        EnvoyUnit::Hour => Unit::Hour,
        EnvoyUnit::Day => Unit::Day,
        EnvoyUnit::Week => Unit::Week,
        EnvoyUnit::Month => Unit::Month,
        EnvoyUnit::Year => Unit::Year,
    }
}

/// Whole seconds from UNIX second `unix_s` to the end of its window of `unit`: a full unit
/// on the boundary itself, as that service counts.
pub(super) fn seconds_to_reset(unit: EnvoyUnit, unix_s: u64) -> u64 {
    let len = unit.seconds();
    len - unix_s % len
}

/// The rule each descriptor matches, with those another matched rule replaces left out
/// (an unlimited rule stays unlimited); a descriptor's limit override in place of its rule.
/// An override that cannot be counted fails the request.
fn matched_rules(engine: &Engine, r: &RateLimitRequest) -> Result<Vec<Option<Rule>>, Status> {
    let mut replaced: Vec<String> = Vec::new();
    let mut rules: Vec<Option<Rule>> = Vec::with_capacity(r.descriptors.len());
    for (i, d) in r.descriptors.iter().enumerate() {
        if let Some(limit) = &d.limit {
            rules.push(override_rule(engine, &r.domain, i, d, limit)?);
            continue;
        }
        let entries = entries_of(d);
        rules.push(engine.with_envoy_rule(&r.domain, &entries, |m| {
            m.map(|m| {
                replaced.extend(m.replaces.iter().cloned());
                Rule::of(m)
            })
        }));
    }
    if !replaced.is_empty() {
        for slot in &mut rules {
            let is_replaced = slot.as_ref().is_some_and(|rule| {
                !rule.unlimited && rule.name.as_ref().is_some_and(|n| replaced.contains(n))
            });
            if is_replaced {
                *slot = None;
            }
        }
    }
    Ok(rules)
}

pub(super) type Entries<'a> = SmallVec<[(&'a str, &'a str); ENTRIES_INLINE]>;

fn entries_of(
    d: &leasehold_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor,
) -> Entries<'_> {
    d.entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect()
}

#[tonic::async_trait]
impl RateLimitService for RlsServer {
    async fn should_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let r = req.into_inner();
        // Answered as that service does: an error status, not a response, so Envoy's
        // failure mode decides.
        if r.domain.is_empty() {
            return Err(Status::unknown("rate limit domain must not be empty"));
        }
        if r.descriptors.is_empty() {
            return Err(Status::unknown(
                "rate limit descriptor list must not be empty",
            ));
        }
        let now = self.clock.now();
        let unix_s = self.engine.unix_time(now).0 / 1_000_000_000;
        let rules = matched_rules(&self.engine, &r)?;
        let request_hits = u64::from(r.hits_addend.max(1));
        let mut statuses = Vec::with_capacity(r.descriptors.len());
        for (d, rule) in r.descriptors.iter().zip(&rules) {
            let hits = d.hits_addend.unwrap_or(request_hits);
            let entries = entries_of(d);
            statuses.push(self.status(&r.domain, &entries, rule.as_ref(), hits, now, unix_s));
        }
        let response_headers_to_add = match &self.headers {
            Some(names) => rate_limit_headers(names, &statuses, &rules, unix_s),
            None => Vec::new(),
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: overall_code(&statuses, &rules) as i32,
            statuses,
            response_headers_to_add,
            ..Default::default()
        }))
    }
}

impl RlsServer {
    /// One descriptor's status; `rule` is the rule it matched and that applies (`None`: no
    /// rule, or a replaced one, which report OK with no limit).
    fn status(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        rule: Option<&Rule>,
        hits: u64,
        now: leasehold_common::time::Nanos,
        unix_s: u64,
    ) -> DescriptorStatus {
        let Some(rule) = rule else {
            return ok_status(0);
        };
        if rule.unlimited {
            return ok_status(u32::MAX);
        }
        let positional;
        let dims = match &rule.overridden {
            Some(OverrideRule::Policy(id)) => {
                positional = positional_entries(entries);
                [Dimension::policy(id, &positional)]
            }
            Some(_) => return over_limit_status(rule, unix_s),
            None => [Dimension::envoy(domain, entries)],
        };
        let admit = AdmitRequest {
            hits,
            ..AdmitRequest::new(&dims)
        };
        let decision = self.engine.admit(&admit, now);
        let (over, remaining) = match decision.results.first() {
            Some(x) => match x.outcome {
                Outcome::Denied(_) | Outcome::InvalidKey => (true, 0),
                Outcome::ShadowDenied(_) => (false, 0),
                _ => (false, u32::try_from(x.remaining).unwrap_or(u32::MAX)),
            },
            None => (false, 0),
        };
        DescriptorStatus {
            code: if over { Code::OverLimit } else { Code::Ok } as i32,
            current_limit: rule.current_limit(),
            limit_remaining: remaining,
            duration_until_reset: rule.duration_until_reset(unix_s),
            quota: None,
        }
    }
}

impl Rule {
    pub(super) fn duration_until_reset(&self, unix_s: u64) -> Option<prost_types::Duration> {
        self.limit.map(|l| prost_types::Duration {
            seconds: i64::try_from(seconds_to_reset(l.unit, unix_s)).unwrap_or(i64::MAX),
            nanos: 0,
        })
    }
}

fn ok_status(limit_remaining: u32) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        limit_remaining,
        ..Default::default()
    }
}

/// OVER_LIMIT when an ordinary rule's descriptor is over, or every quota rule's is.
fn overall_code(statuses: &[DescriptorStatus], rules: &[Option<Rule>]) -> Code {
    let (mut quota, mut quota_over) = (0, 0);
    for (status, rule) in statuses.iter().zip(rules) {
        let over = status.code == Code::OverLimit as i32;
        if rule.as_ref().is_some_and(|r| r.quota_mode) {
            quota += 1;
            quota_over += usize::from(over);
        } else if over {
            return Code::OverLimit;
        }
    }
    if quota > 0 && quota == quota_over {
        Code::OverLimit
    } else {
        Code::Ok
    }
}
