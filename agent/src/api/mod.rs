//! The agent's network APIs over the enforcement engine: Envoy's rate-limit service (gRPC),
//! HTTP admission with IETF rate-limit headers, metrics and health, and the listeners
//! that serve them.

pub mod admit;
pub mod dims;
pub mod http;
pub mod listen;
pub mod metrics;
pub use leasehold_proto::transport::request_budget;
pub mod rls;
pub mod rls_headers;
mod rls_override;
