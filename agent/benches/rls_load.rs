//! Load generator: Envoy RLS `ShouldRateLimit` over loopback gRPC against the agent's server,
//! with rules enforced in process (as `leasehold-agent --standalone --ratelimit-config`).
//!
//! `cargo bench -p leasehold-agent --bench rls_load -- [--seconds S] [--clients N]`
//!
//! Reports decisions per second and the client-side latency distribution (p50, p99, max).

use leasehold_agent::api::rls::RlsServer;
use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMITS: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let (seconds, clients, connections) = (
        arg("--seconds", 5),
        arg("--clients", 64),
        arg("--connections", 4),
    );
    let envoy = EnvoyConfig::from_yaml("edge.yaml", LIMITS).unwrap();
    let mut rules = RuleSource::from_policies(Vec::new());
    rules.envoy = Some(envoy.clone());
    let clock = SystemClock::new();
    let engine = Arc::new(Engine::builder().start(clock.now()).build(rules).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = RateLimitServiceServer::new(RlsServer::new(engine, Arc::new(envoy), clock, false));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut channels = Vec::new();
    for _ in 0..connections.max(1) {
        channels.push(
            tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap(),
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut client =
            RateLimitServiceClient::new(channels[(c % connections.max(1)) as usize].clone());
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let req = RateLimitRequest {
                    domain: "edge".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "tenant".into(),
                            value: format!("t{}", c % 100),
                        }],
                        limit: None,
                        hits_addend: None,
                    }],
                    hits_addend: 1,
                };
                let t = Instant::now();
                if client.should_rate_limit(req).await.is_ok() {
                    latencies.push(t.elapsed());
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "Envoy RLS over loopback gRPC: {clients} clients on {connections} connections, {seconds} s"
    );
    println!(
        "decisions: {} ({:.0}/s)",
        all.len(),
        all.len() as f64 / elapsed
    );
    println!(
        "latency p50: {:?}  p99: {:?}  max: {:?}",
        pct(0.50),
        pct(0.99),
        all.last().copied().unwrap_or_default()
    );
}
