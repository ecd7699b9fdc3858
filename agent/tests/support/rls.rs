//! An in-process RLS server over a real socket, its clock on a chosen UNIX instant, and the
//! requests a generated Envoy client sends.

use leasehold_agent::api::rls::{rls_service, RlsServer};
use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

pub type Rls = RateLimitServiceClient<Channel>;

/// A server enforcing `config` whose time starts at `wall` (RFC 3339), with rate-limit
/// headers on, and a client connected to it.
pub async fn start(config: &str, wall: &str) -> Rls {
    let envoy = EnvoyConfig::from_yaml("config.yaml", config).unwrap();
    let clock = SystemClock::new();
    let wall: jiff::Timestamp = wall.parse().unwrap();
    let engine = Engine::builder()
        .start(clock.now())
        .wall_clock(move || wall)
        .build(RuleSource {
            policies: Vec::new(),
            envoy: Some(envoy),
        })
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = rls_service(RlsServer::new(std::sync::Arc::new(engine), clock, true));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// A descriptor of `entries`, hits taken from the request.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

/// A descriptor with its own `hits_addend`.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(hits),
        ..desc(entries)
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// Asks about `descriptors` in domain `conformance`.
pub async fn call(c: &mut Rls, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    c.should_rate_limit(request("conformance", descriptors))
        .await
        .unwrap()
        .into_inner()
}
