//! The agent's network APIs over the enforcement engine: Envoy's rate-limit service (gRPC),
//! HTTP admission with IETF rate-limit headers, metrics and health.

pub mod admit;
pub mod http;
pub mod metrics;
pub mod rls;
