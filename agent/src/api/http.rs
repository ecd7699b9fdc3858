//! The agent's HTTP API: `POST /v1/admit` (200 or 429 with `Retry-After` and the IETF
//! `RateLimit-Policy` / `RateLimit` fields), `/metrics`, `/healthz`, `/readyz`.

use super::dims::{DimensionError, DimensionRules, RequestDimension};
use super::request_budget::RequestBudget;
use crate::engine::{AdmitRequest, Decision, Dimension, Engine, Outcome};
use crate::exact::ExactGate;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::transport::Peer;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Dimensions accepted in one HTTP request (the engine accepts at most 8).
pub const HTTP_DIMENSIONS_MAX: usize = 8;

/// The HTTP body's own size limit bounds the entries of a dimension.
const RULES: DimensionRules = DimensionRules {
    dimensions_max: HTTP_DIMENSIONS_MAX,
    entries_max: usize::MAX,
    target_rule: "give exactly one of `policy` or `domain`",
};

#[derive(Clone)]
struct Http {
    engine: Arc<Engine>,
    gate: Arc<ExactGate>,
    clock: SystemClock,
    budget: Option<Arc<RequestBudget>>,
}

// Serialize only writes a read body back in one form, for `read_admit_body`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct AdmitBody {
    dimensions: Vec<DimensionBody>,
    #[serde(default)]
    route: Option<String>,
    #[serde(default)]
    priority: u8,
    #[serde(default)]
    bytes: Option<u64>,
    /// The caller waits `delay_ms` before sending, so a shaping policy may admit with one.
    #[serde(default)]
    accept_delay: bool,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct DimensionBody {
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    domain: Option<String>,
    #[serde(default)]
    entries: BTreeMap<String, String>,
}

impl RequestDimension for DimensionBody {
    fn policy_id(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Whether the agent may serve; the reason when it may not.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The HTTP API of an agent that is always ready (its rules are local).
pub fn router(engine: Arc<Engine>, clock: SystemClock) -> Router {
    let gate = Arc::new(ExactGate::new(engine));
    router_with_readiness(gate, clock, Arc::new(|| Ok(())), None)
}

/// The HTTP API, deciding exact policies through `gate`; `/readyz` answers 503 with the
/// reason while `ready` says no. `/metrics` reports the gRPC services' `budget` if given.
pub fn router_with_readiness(
    gate: Arc<ExactGate>,
    clock: SystemClock,
    ready: Readiness,
    budget: Option<Arc<RequestBudget>>,
) -> Router {
    let engine = Arc::clone(gate.engine());
    let readyz = move || {
        let ready = Arc::clone(&ready);
        async move {
            match ready() {
                Ok(()) => (StatusCode::OK, "ready\n".to_string()),
                Err(why) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {why}\n"),
                ),
            }
        }
    };
    Router::new()
        .route(
            "/v1/admit",
            post(admit).layer(axum::extract::DefaultBodyLimit::max(ADMIT_BODY_LEN_MAX)),
        )
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(Http {
            engine,
            gate,
            clock,
            budget,
        })
}

/// Largest `/v1/admit` body accepted, in bytes; a larger one is answered 413. A decision's
/// dimensions and entries fit in far less.
pub const ADMIT_BODY_LEN_MAX: usize = 64 * 1024;

fn bad(message: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": message}))).into_response()
}

async fn admit(
    State(h): State<Http>,
    peer: Option<axum::Extension<Peer>>,
    body: Result<Json<AdmitBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    // Who calls, for sharing out first leases: the client certificate or address.
    let source = peer.map_or(0, |axum::Extension(p)| p.source());
    let body = match body {
        Ok(Json(b)) => b,
        // 413 for a body over the limit and 415 for a wrong content type, as the rejection
        // says; any other body that is not the request is a plain 400.
        Err(e) => {
            let message = format!("request body: {}", e.body_text());
            let status = match e.status() {
                s @ (StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE) => s,
                _ => StatusCode::BAD_REQUEST,
            };
            return (status, Json(json!({ "error": message }))).into_response();
        }
    };
    let asks = match RULES.with_dimensions(&body.dimensions, |dims| {
        h.gate
            .begin(&request_of(&body, dims, source), h.clock.now())
    }) {
        Ok(Ok(decision)) => return respond(&decision),
        Ok(Err(asks)) => asks,
        Err(e) => return bad(e.to_string()),
    };
    let asked = h.gate.ask(asks).await;
    let decision = RULES.with_dimensions(&body.dimensions, |dims| {
        h.gate
            .finish(&request_of(&body, dims, source), h.clock.now(), &asked)
    });
    match decision {
        Ok(decision) => respond(&decision),
        Err(e) => bad(e.to_string()),
    }
}

/// Why a `/v1/admit` body is not an admission request.
#[derive(Debug, thiserror::Error)]
pub enum AdmitBodyError {
    #[error("request body: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Dimensions(#[from] DimensionError),
}

/// A `/v1/admit` body read as far as the engine.
#[derive(Debug, PartialEq, Eq)]
pub struct AdmitBodyRead {
    /// Dimensions the engine would be asked about.
    pub dimensions: usize,
    /// The body written back in one form: reading it gives this same value.
    pub canonical: String,
}

/// Reads a `/v1/admit` body as the endpoint does (the JSON, then the dimensions' number,
/// entries and targets) without deciding it: what the endpoint's fuzz target exercises.
pub fn read_admit_body(body: &[u8]) -> Result<AdmitBodyRead, AdmitBodyError> {
    let body: AdmitBody = serde_json::from_slice(body)?;
    let dimensions = RULES.with_dimensions(&body.dimensions, |dims| {
        request_of(&body, dims, 0).dimensions.len()
    })?;
    let canonical = serde_json::to_string(&body)?;
    Ok(AdmitBodyRead {
        dimensions,
        canonical,
    })
}

fn request_of<'a>(body: &'a AdmitBody, dims: &'a [Dimension<'a>], source: u32) -> AdmitRequest<'a> {
    let mut req = AdmitRequest::new(dims);
    req.source = source;
    req.route = body.route.as_deref();
    req.priority = body.priority;
    req.bytes = body.bytes;
    req.accept_delay = body.accept_delay;
    req
}

fn outcome_name(o: Outcome) -> String {
    format!("{o:?}").to_lowercase()
}

fn respond(d: &Decision) -> Response {
    let results: Vec<_> = d
        .results
        .iter()
        .map(|r| {
            json!({
                "policy": r.policy_id.as_deref(),
                "version": r.policy_version,
                "outcome": outcome_name(r.outcome),
                "limit": r.limit,
                "remaining": r.remaining,
                "reset_after_ms": r.reset_after_ns.div_ceil(1_000_000),
            })
        })
        .collect();
    let deciding = d
        .denial
        .and_then(|x| x.dimension)
        .and_then(|i| d.results.get(i))
        .or_else(|| {
            d.results
                .iter()
                .filter(|r| r.limit > 0)
                .min_by_key(|r| r.remaining)
        });
    let mut headers = HeaderMap::new();
    if let Some(r) = deciding {
        let name = r.policy_id.as_deref().unwrap_or("limit");
        let window_s = r.reset_after_ns.div_ceil(1_000_000_000).max(1);
        if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";q={};w={window_s}", r.limit)) {
            headers.insert("ratelimit-policy", v);
        }
        let reset_s = r.reset_after_ns.div_ceil(1_000_000_000);
        if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";r={};t={reset_s}", r.remaining)) {
            headers.insert("ratelimit", v);
        }
    }
    let body = json!({
        "allowed": d.allowed,
        "decision_id": format!("{:016x}", d.decision_id),
        "reason": d.denial.map(|x| format!("{:?}", x.reason).to_lowercase()),
        "retry_after_ms": d.retry_after_ns.div_ceil(1_000_000),
        // Rounded up: a caller waiting the whole milliseconds never goes early.
        "delay_ms": d.delay_ns.div_ceil(1_000_000),
        "results": results,
    });
    if d.allowed {
        return (StatusCode::OK, headers, Json(body)).into_response();
    }
    let retry_s = d.retry_after_ns.div_ceil(1_000_000_000).max(1);
    if let Ok(v) = HeaderValue::from_str(&retry_s.to_string()) {
        headers.insert("retry-after", v);
    }
    (StatusCode::TOO_MANY_REQUESTS, headers, Json(body)).into_response()
}

async fn metrics(State(h): State<Http>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        {
            let mut text = super::metrics::render(&h.engine.stats(), h.gate.counters());
            if let Some(b) = &h.budget {
                text.push_str(&super::metrics::render_request_budget(b));
                let handshakes = leasehold_proto::transport::handshake_stats();
                text.push_str(&super::metrics::render_handshakes(handshakes));
            }
            text
        },
    )
}
