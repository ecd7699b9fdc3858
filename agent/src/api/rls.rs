//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`), wire-compatible,
//! so an Envoy gateway points its `ratelimit` filter at the agent unchanged.
//!
//! As envoyproxy/ratelimit does, every descriptor is evaluated on its own (a descriptor that is
//! over its limit does not undo the others) and `statuses` follows the request's order; the
//! overall code is OVER_LIMIT if any descriptor is. `hits_addend` on a descriptor overrides the
//! request's, and 0 counts as 1.
//!
//! The domains are the engine's: a local file's, or the domain documents the allocator
//! pushes, so a domain applied or changed with `leasectl` is answered without a restart.

use crate::engine::{AdmitRequest, Dimension, Engine, Outcome};
use leasehold_common::policy::envoy::EnvoyUnit;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::envoy::config::core::v3::HeaderValue;
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

/// Descriptors accepted in one request.
pub const DESCRIPTORS_MAX: usize = 64;
/// Entries accepted in one descriptor.
pub const ENTRIES_MAX: usize = 16;
/// Entries of a descriptor viewed without a heap allocation; Envoy descriptors rarely have
/// more than a handful.
const ENTRIES_INLINE: usize = 4;

/// `server` as a gRPC service that refuses messages over
/// [`GRPC_MESSAGE_LEN_MAX`](super::listen::GRPC_MESSAGE_LEN_MAX) before buffering them.
pub fn rls_service(server: RlsServer) -> RateLimitServiceServer<RlsServer> {
    RateLimitServiceServer::new(server)
        .max_decoding_message_size(super::listen::GRPC_MESSAGE_LEN_MAX)
}

pub struct RlsServer {
    engine: Arc<Engine>,
    clock: SystemClock,
    /// Add `x-ratelimit-*` response headers, as envoyproxy/ratelimit does when enabled.
    headers: bool,
}

impl RlsServer {
    pub fn new(engine: Arc<Engine>, clock: SystemClock, headers: bool) -> Self {
        RlsServer {
            engine,
            clock,
            headers,
        }
    }
}

fn unit(u: EnvoyUnit) -> Unit {
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

fn duration(ns: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: (ns % 1_000_000_000) as i32,
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsServer {
    async fn should_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let r = req.into_inner();
        if r.descriptors.len() > DESCRIPTORS_MAX {
            return Err(Status::invalid_argument(format!(
                "descriptors: {} given, at most {DESCRIPTORS_MAX}",
                r.descriptors.len()
            )));
        }
        let now = self.clock.now();
        let request_hits = u64::from(r.hits_addend.max(1));
        let mut statuses = Vec::with_capacity(r.descriptors.len());
        let mut over = false;
        let mut tightest: Option<(u64, u64, u64)> = None;
        for (i, d) in r.descriptors.iter().enumerate() {
            if d.entries.len() > ENTRIES_MAX {
                return Err(Status::invalid_argument(format!(
                    "descriptors[{i}].entries: {} given, at most {ENTRIES_MAX}",
                    d.entries.len()
                )));
            }
            let entries: SmallVec<[(&str, &str); ENTRIES_INLINE]> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            let hits = d.hits_addend.map_or(request_hits, |h| h.max(1));
            let dims = [Dimension::envoy(&r.domain, &entries)];
            let mut admit = AdmitRequest::new(&dims);
            admit.hits = hits;
            let decision = self.engine.admit(&admit, now);
            let result = decision.results.first();
            let current_limit = self.engine.with_envoy_rule(&r.domain, &entries, |rule| {
                rule.and_then(|m| {
                    m.limit.map(|l| RateLimit {
                        name: m.name.clone().unwrap_or_default(),
                        requests_per_unit: l.requests_per_unit,
                        unit: unit(l.unit) as i32,
                    })
                })
            });
            let limited = matches!(
                result.map(|x| x.outcome),
                Some(Outcome::Denied(_)) | Some(Outcome::InvalidKey)
            );
            over |= limited;
            let (remaining, reset_ns) = result.map_or((0, 0), |x| (x.remaining, x.reset_after_ns));
            if let (Some(l), Some(x)) = (&current_limit, result) {
                if tightest.is_none_or(|t| x.remaining < t.1) {
                    tightest = Some((
                        u64::from(l.requests_per_unit),
                        x.remaining,
                        x.reset_after_ns,
                    ));
                }
            }
            statuses.push(DescriptorStatus {
                code: if limited { Code::OverLimit } else { Code::Ok } as i32,
                limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                duration_until_reset: current_limit.as_ref().map(|_| duration(reset_ns)),
                current_limit,
                quota: None,
            });
        }
        let mut response_headers_to_add = Vec::new();
        if let (true, Some((limit, remaining, reset_ns))) = (self.headers, tightest) {
            let header = |k: &str, v: String| HeaderValue {
                key: k.into(),
                value: v,
                raw_value: Vec::new(),
            };
            response_headers_to_add.push(header("x-ratelimit-limit", limit.to_string()));
            response_headers_to_add.push(header("x-ratelimit-remaining", remaining.to_string()));
            response_headers_to_add.push(header(
                "x-ratelimit-reset",
                reset_ns.div_ceil(1_000_000_000).to_string(),
            ));
        }
        Ok(Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            ..Default::default()
        }))
    }
}
