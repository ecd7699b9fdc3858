//! The native gRPC admission API (`leasehold.v1.AdmitService`): several dimensions charged
//! all or none, priority, route-based cost, decision ids.

use crate::engine::{AdmitRequest, DenyReason, Dimension, Engine, Outcome};
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admit_service_server::AdmitService;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Dimensions accepted in one request (the engine's own limit).
pub const ADMIT_DIMENSIONS_MAX: usize = 8;
/// Entries accepted per dimension.
pub const ADMIT_ENTRIES_MAX: usize = 16;

pub struct AdmitServer {
    engine: Arc<Engine>,
    clock: SystemClock,
}

impl AdmitServer {
    pub fn new(engine: Arc<Engine>, clock: SystemClock) -> Self {
        AdmitServer { engine, clock }
    }
}

fn reason(o: Outcome) -> pb::Reason {
    match o {
        Outcome::Admitted | Outcome::Unlimited | Outcome::Replaced => pb::Reason::Ok,
        Outcome::Denied(
            DenyReason::Unreachable | DenyReason::AwaitingLease | DenyReason::LeaseRefused,
        ) => pb::Reason::UpstreamUnavailable,
        Outcome::Denied(DenyReason::Restricted) | Outcome::Restricted => pb::Reason::Restricted,
        Outcome::Denied(DenyReason::InvalidKey) | Outcome::InvalidKey => pb::Reason::InvalidKey,
        Outcome::Denied(_) => pb::Reason::OverLimit,
        Outcome::ShadowDenied(_) => pb::Reason::ShadowDeny,
        Outcome::FailOpen => pb::Reason::FailOpen,
        Outcome::KillSwitch => pb::Reason::KillSwitch,
        Outcome::NoRule => pb::Reason::NoRule,
        Outcome::Skipped | Outcome::RolledBack => pb::Reason::NotCharged,
    }
}

#[tonic::async_trait]
impl AdmitService for AdmitServer {
    async fn admit(
        &self,
        req: Request<pb::AdmitRequest>,
    ) -> Result<Response<pb::AdmitResponse>, Status> {
        let r = req.into_inner();
        if r.dimensions.is_empty() || r.dimensions.len() > ADMIT_DIMENSIONS_MAX {
            return Err(Status::invalid_argument(format!(
                "dimensions: give 1 to {ADMIT_DIMENSIONS_MAX}"
            )));
        }
        if r.dry_run {
            return Err(Status::unimplemented(
                "dry_run: this agent only evaluates by charging",
            ));
        }
        let priority =
            u8::try_from(r.priority).map_err(|_| Status::invalid_argument("priority: 0 to 255"))?;
        let mut entries: Vec<Vec<(&str, &str)>> = Vec::with_capacity(r.dimensions.len());
        for (i, d) in r.dimensions.iter().enumerate() {
            if d.entries.len() > ADMIT_ENTRIES_MAX {
                return Err(Status::invalid_argument(format!(
                    "dimensions[{i}].entries: at most {ADMIT_ENTRIES_MAX}"
                )));
            }
            entries.push(
                d.entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
                    .collect(),
            );
        }
        let mut dims = Vec::with_capacity(r.dimensions.len());
        for (i, d) in r.dimensions.iter().enumerate() {
            dims.push(match (d.policy_id.is_empty(), d.domain.is_empty()) {
                (false, true) => Dimension::policy(&d.policy_id, &entries[i]),
                (true, false) => Dimension::envoy(&d.domain, &entries[i]),
                _ => {
                    return Err(Status::invalid_argument(format!(
                        "dimensions[{i}]: set exactly one of policy_id or domain"
                    )))
                }
            });
        }
        let mut admit = AdmitRequest::new(&dims);
        admit.route = (!r.route.is_empty()).then_some(r.route.as_str());
        admit.priority = priority;
        let d = self.engine.admit(&admit, self.clock.now());
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
        }))
    }
}
