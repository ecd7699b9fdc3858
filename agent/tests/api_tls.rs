//! Mutual TLS on the agent's gRPC listener, configured through `listen_tls`: a gateway with
//! a certificate from the configured CA is answered; a client without a certificate, or with
//! one from another CA, is refused at the handshake. Also through the binary's `--tls-*` flags.

use leasehold_agent::api::listen::{grpc_server, grpc_tls_config, serve_grpc, ListenAddr};
use leasehold_agent::api::rls::RlsServer;
use leasehold_agent::config::AgentConfig;
use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use leasehold_proto::transport::{client_tls_config, DevPki, PkiSpec, Role};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tonic::transport::{Channel, Endpoint};

mod support;
use support::{agent_pki, free_addr, spawn_with_tls, tls_files};

const LIMITS: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: "acme".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

/// Serves Envoy RLS as the binary does: TLS material from the config, on a bound listener.
async fn start(cfg: &AgentConfig) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let envoy = EnvoyConfig::from_yaml("edge.yaml", LIMITS).unwrap();
    let mut rules = RuleSource::from_policies(Vec::new());
    rules.envoy = Some(envoy);
    let clock = SystemClock::new();
    let engine = Arc::new(Engine::builder().start(clock.now()).build(rules).unwrap());
    let tls = cfg.listen_tls_pem().unwrap();
    let router = grpc_server().add_service(RateLimitServiceServer::new(RlsServer::new(
        engine, clock, false,
    )));
    let listener = cfg.grpc_listen().unwrap().bind().await.unwrap();
    let ListenAddr::Tcp(addr) = listener.local_addr().unwrap() else {
        unreachable!("bound to TCP")
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let tls = tls.as_ref().map(|t| grpc_tls_config(t).unwrap());
    tokio::spawn(serve_grpc(
        router,
        listener,
        tls,
        cfg.grpc_limits(64),
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stop)
}

async fn ask(channel: Channel) -> Result<Code, tonic::Status> {
    let r = RateLimitServiceClient::new(channel)
        .should_rate_limit(request())
        .await?
        .into_inner();
    Ok(Code::try_from(r.overall_code).unwrap())
}

/// Whether a client configured by `endpoint` gets any answer at all.
async fn answered(endpoint: Endpoint) -> bool {
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2));
    match endpoint.connect().await {
        Ok(channel) => ask(channel).await.is_ok(),
        Err(_) => false,
    }
}

#[tokio::test]
async fn the_grpc_listener_answers_clients_with_a_certificate_from_its_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let pki = DevPki::generate(
        &PkiSpec::local(&[], &["gw-1", "edge-proxy"], &[]),
        SystemTime::now(),
    )
    .unwrap();
    pki.write_to(dir.path(), false).unwrap();
    let cfg = AgentConfig {
        grpc_addr: "127.0.0.1:0".into(),
        standalone: true,
        listen_tls: Some(tls_files(dir.path(), Role::Agent, "gw-1")),
        ..AgentConfig::default()
    };
    cfg.validate().unwrap();
    let (addr, stop) = start(&cfg).await;
    let url = format!("https://{addr}");

    // A gateway with a certificate from the CA: answered, and limited as configured.
    let gateway = pki.tls_pem(Role::Agent, "edge-proxy").unwrap();
    let channel = Endpoint::from_shared(url.clone())
        .unwrap()
        .tls_config(client_tls_config(&gateway, "127.0.0.1").unwrap())
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_eq!(ask(channel.clone()).await.unwrap(), Code::Ok);
    assert_eq!(ask(channel.clone()).await.unwrap(), Code::Ok);
    assert_eq!(ask(channel).await.unwrap(), Code::OverLimit);

    // TLS that trusts the agent but presents no client certificate: refused.
    let anonymous = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&pki.ca_cert_pem))
        .domain_name("127.0.0.1");
    let no_cert = Endpoint::from_shared(url.clone())
        .unwrap()
        .tls_config(anonymous)
        .unwrap();
    assert!(!answered(no_cert).await, "a client without a certificate");

    // A certificate from another CA (which trusts the agent's CA): refused.
    let other = DevPki::generate(
        &PkiSpec::local(&[], &["edge-proxy"], &[]),
        SystemTime::now(),
    )
    .unwrap();
    let mut stranger = other.tls_pem(Role::Agent, "edge-proxy").unwrap();
    stranger.ca = pki.ca_cert_pem.clone();
    let foreign = Endpoint::from_shared(url)
        .unwrap()
        .tls_config(client_tls_config(&stranger, "127.0.0.1").unwrap())
        .unwrap();
    assert!(!answered(foreign).await, "a certificate from another CA");

    // Plaintext: refused.
    let plain = Endpoint::from_shared(format!("http://{addr}")).unwrap();
    assert!(!answered(plain).await, "a plaintext client");
    let _ = stop.send(());
}

#[tokio::test]
async fn without_listen_tls_a_loopback_listener_serves_plaintext() {
    let cfg = AgentConfig {
        grpc_addr: "127.0.0.1:0".into(),
        standalone: true,
        ..AgentConfig::default()
    };
    cfg.validate().unwrap();
    let (addr, stop) = start(&cfg).await;
    let plain = Endpoint::from_shared(format!("http://{addr}")).unwrap();
    assert!(answered(plain).await);
    let _ = stop.send(());
}

#[tokio::test]
async fn the_binary_serves_mutual_tls_given_the_tls_flags() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, tls) = agent_pki(dir.path());
    let limits = dir.path().join("edge.yaml");
    std::fs::write(&limits, LIMITS).unwrap();
    let addr = free_addr().to_string();
    let http = format!("unix:{}", dir.path().join("http.sock").display());
    let limits = limits.display().to_string();
    let _running = spawn_with_tls(
        &[
            "--standalone",
            "--ratelimit-config",
            &limits,
            "--grpc-addr",
            &addr,
            "--http-addr",
            &http,
        ],
        &tls,
    );
    let gateway = pki.tls_pem(Role::Agent, "edge-proxy").unwrap();
    let endpoint = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(client_tls_config(&gateway, "127.0.0.1").unwrap())
        .unwrap();
    let started = std::time::Instant::now();
    let channel = loop {
        match endpoint.connect().await {
            Ok(channel) => break channel,
            Err(e) if started.elapsed() > Duration::from_secs(10) => panic!("never up: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert_eq!(ask(channel).await.unwrap(), Code::Ok);
    let plain = Endpoint::from_shared(format!("http://{addr}")).unwrap();
    assert!(!answered(plain).await, "a plaintext client");
}
