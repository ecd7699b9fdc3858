//! The native gRPC admission API (`leasehold.v1.AdmitService`): several dimensions charged
//! all or none, priority, route-based cost, decision ids.

use super::dims::{DimensionRules, RequestDimension};
use crate::engine::{AdmitRequest, DenyReason, Dimension, Engine, Outcome};
use crate::exact::ExactGate;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admit_service_server::{AdmitService, AdmitServiceServer};
use leasehold_proto::transport::source_of;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Dimensions accepted in one request (the engine's own limit).
pub const ADMIT_DIMENSIONS_MAX: usize = 8;
/// Entries accepted per dimension.
pub const ADMIT_ENTRIES_MAX: usize = 16;

const RULES: DimensionRules = DimensionRules {
    dimensions_max: ADMIT_DIMENSIONS_MAX,
    entries_max: ADMIT_ENTRIES_MAX,
    target_rule: "set exactly one of policy_id or domain",
};

/// `server` as a gRPC service that refuses messages over
/// [`GRPC_MESSAGE_LEN_MAX`](super::listen::GRPC_MESSAGE_LEN_MAX) before buffering them.
pub fn admit_service(server: AdmitServer) -> AdmitServiceServer<AdmitServer> {
    AdmitServiceServer::new(server).max_decoding_message_size(super::listen::GRPC_MESSAGE_LEN_MAX)
}

pub struct AdmitServer {
    gate: Arc<ExactGate>,
    clock: SystemClock,
}

impl AdmitServer {
    /// Exact policies' dimensions follow their failure behaviour: no allocator to ask.
    pub fn new(engine: Arc<Engine>, clock: SystemClock) -> Self {
        Self::with_gate(Arc::new(ExactGate::new(engine)), clock)
    }

    /// Exact policies' dimensions are decided through `gate`.
    pub fn with_gate(gate: Arc<ExactGate>, clock: SystemClock) -> Self {
        AdmitServer { gate, clock }
    }
}

impl RequestDimension for pb::Dimension {
    fn policy_id(&self) -> Option<&str> {
        (!self.policy_id.is_empty()).then_some(self.policy_id.as_str())
    }

    fn domain(&self) -> Option<&str> {
        (!self.domain.is_empty()).then_some(self.domain.as_str())
    }

    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
    }
}

fn reason(o: Outcome) -> pb::Reason {
    match o {
        Outcome::Admitted | Outcome::Unlimited | Outcome::Replaced => pb::Reason::Ok,
        Outcome::Denied(DenyReason::Unreachable) => pb::Reason::UpstreamUnavailable,
        Outcome::Denied(DenyReason::AwaitingLease | DenyReason::AcquireQueueFull) => {
            pb::Reason::AwaitingLease
        }
        Outcome::Denied(DenyReason::Restricted) | Outcome::Restricted => pb::Reason::Restricted,
        Outcome::Denied(DenyReason::InvalidKey) | Outcome::InvalidKey => pb::Reason::InvalidKey,
        Outcome::Denied(DenyReason::UnknownPolicy) => pb::Reason::UnknownPolicy,
        Outcome::Denied(_) => pb::Reason::OverLimit,
        Outcome::ShadowDenied(_) => pb::Reason::ShadowDeny,
        Outcome::FailOpen => pb::Reason::FailOpen,
        Outcome::KillSwitch => pb::Reason::KillSwitch,
        Outcome::NoRule => pb::Reason::NoRule,
        Outcome::Skipped | Outcome::RolledBack => pb::Reason::NotCharged,
    }
}

/// Who is calling, for sharing out first leases between callers: the client certificate
/// where there is one (each gateway has its own), else the peer's IP address; 0 when
/// neither is known (a Unix socket).
fn caller_source<T>(req: &Request<T>) -> u32 {
    let certs = req.peer_certs();
    let cert = certs.as_deref().and_then(|c| c.first()).map(|c| c.as_ref());
    source_of(cert, req.remote_addr().map(|a| a.ip()))
}

fn request_of<'a>(
    r: &'a pb::AdmitRequest,
    dims: &'a [Dimension<'a>],
    (priority, source): (u8, u32),
) -> AdmitRequest<'a> {
    let mut admit = AdmitRequest::new(dims);
    admit.source = source;
    admit.route = (!r.route.is_empty()).then_some(r.route.as_str());
    admit.priority = priority;
    admit.accept_delay = r.accept_delay;
    admit
}

#[tonic::async_trait]
impl AdmitService for AdmitServer {
    async fn admit(
        &self,
        req: Request<pb::AdmitRequest>,
    ) -> Result<Response<pb::AdmitResponse>, Status> {
        let source = caller_source(&req);
        let r = req.into_inner();
        let invalid = |e: super::dims::DimensionError| Status::invalid_argument(e.to_string());
        RULES.check_count(r.dimensions.len()).map_err(invalid)?;
        if r.dry_run {
            return Err(Status::unimplemented(
                "dry_run: this agent only evaluates by charging",
            ));
        }
        let priority =
            u8::try_from(r.priority).map_err(|_| Status::invalid_argument("priority: 0 to 255"))?;
        // The dimensions borrow the request: with exact policies they are built again after
        // the allocator's answer, rather than held across the wait.
        let begun = RULES
            .with_dimensions(&r.dimensions, |dims| {
                self.gate
                    .begin(&request_of(&r, dims, (priority, source)), self.clock.now())
            })
            .map_err(invalid)?;
        let d = match begun {
            Ok(d) => d,
            Err(asks) => {
                let asked = self.gate.ask(asks).await;
                RULES
                    .with_dimensions(&r.dimensions, |dims| {
                        self.gate.finish(
                            &request_of(&r, dims, (priority, source)),
                            self.clock.now(),
                            &asked,
                        )
                    })
                    .map_err(invalid)?
            }
        };
        let results = d
            .results
            .iter()
            .map(|x| pb::DimensionResult {
                policy_id: x.policy_id.as_deref().unwrap_or_default().to_string(),
                allowed: x.outcome.allows(),
                limit: x.limit,
                remaining: x.remaining,
                reset_after_ms: x.reset_after_ns.div_ceil(1_000_000),
                reason: reason(x.outcome) as i32,
                shadow_denied: matches!(x.outcome, Outcome::ShadowDenied(_)),
                window_ms: 0,
                cost: 0,
            })
            .collect();
        // The caller's correlation id is echoed in front of ours so support can find both.
        let decision_id = if r.decision_id.is_empty() {
            format!("{:016x}", d.decision_id)
        } else {
            format!(
                "{}/{:016x}",
                r.decision_id.chars().take(64).collect::<String>(),
                d.decision_id
            )
        };
        Ok(Response::new(pb::AdmitResponse {
            allowed: d.allowed,
            decision_id,
            retry_after_ms: d.retry_after_ns.div_ceil(1_000_000),
            results,
            // Rounded up: a caller waiting the whole milliseconds never goes early.
            delay_ms: d.delay_ns.div_ceil(1_000_000),
        }))
    }
}
