//! Mutual TLS over real sockets: the server learns the caller's role and name from its client
//! certificate, refuses callers without a certificate from its CA, and enforces roles.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use leasehold_proto::envoy::config::core::v3::HeaderValue;
use leasehold_proto::envoy::service::ratelimit::v3::{
    rate_limit_service_client::RateLimitServiceClient,
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer},
    RateLimitRequest, RateLimitResponse,
};
use leasehold_proto::transport::{
    ensure_crypto_provider, serve_router, server_builder, AuthMode, ChannelFactory,
    ChannelSettings, ClientTransport, DevPki, PeerIdentity, PkiSpec, Role, TlsPem,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Response, Status};

const PEER_HEADER: &str = "x-leasehold-peer";

/// Answers with the caller's identity in a response header, after the configured role check.
struct Echo {
    auth: AuthMode,
    allowed: Vec<Role>,
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl RateLimitService for Echo {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let identity = self.auth.authorize(&request, &self.allowed)?;
        if request.get_ref().domain == "slow" {
            tokio::time::sleep(Duration::from_millis(2_000)).await;
        }
        Ok(Response::new(RateLimitResponse {
            response_headers_to_add: vec![HeaderValue {
                key: PEER_HEADER.into(),
                value: identity.to_string(),
                ..Default::default()
            }],
            ..Default::default()
        }))
    }
}

struct TestServer {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), leasehold_proto::transport::ServeError>>,
}

async fn start(tls: Option<&TlsPem>, auth: AuthMode, allowed: &[Role]) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let service = RateLimitServiceServer::new(Echo {
        auth,
        allowed: allowed.to_vec(),
        calls: calls.clone(),
    });
    let router = server_builder(tls).unwrap().add_service(service);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_router(router, listener, async {
        let _ = stopped.await;
    }));
    TestServer {
        addr,
        calls,
        stop,
        task,
    }
}

fn new_pki() -> DevPki {
    let spec = PkiSpec::local(&["alloc-1"], &["gw-1"], &["ops"]);
    DevPki::generate(&spec, SystemTime::now()).unwrap()
}

fn settings() -> ChannelSettings {
    ChannelSettings {
        connect_timeout_ms: 2_000,
        request_timeout_ms: 1_000,
        channels_max: 4,
        ..ChannelSettings::default()
    }
}

fn mtls_channel(pem: TlsPem, addr: SocketAddr) -> Channel {
    let factory = ChannelFactory::new(
        settings(),
        ClientTransport::MutualTls {
            pem,
            server_name: None,
        },
    )
    .unwrap();
    factory.channel(&addr.to_string()).unwrap()
}

async fn call(channel: Channel, domain: &str) -> Result<String, Status> {
    let request = RateLimitRequest {
        domain: domain.into(),
        ..Default::default()
    };
    let response = RateLimitServiceClient::new(channel)
        .should_rate_limit(request)
        .await?
        .into_inner();
    let header = &response.response_headers_to_add[0];
    assert_eq!(header.key, PEER_HEADER);
    Ok(header.value.clone())
}

#[tokio::test]
async fn server_sees_the_role_and_name_of_the_client_certificate() {
    let pki = new_pki();
    let server_pem = pki.tls_pem(Role::Allocator, "alloc-1").unwrap();
    let server = start(Some(&server_pem), AuthMode::MutualTls, &Role::ALL).await;

    let agent = mtls_channel(pki.tls_pem(Role::Agent, "gw-1").unwrap(), server.addr);
    assert_eq!(call(agent, "d").await.unwrap(), "agent/gw-1");
    let admin = mtls_channel(pki.tls_pem(Role::Admin, "ops").unwrap(), server.addr);
    assert_eq!(call(admin, "d").await.unwrap(), "admin/ops");
    assert_eq!(server.calls.load(Ordering::SeqCst), 2);

    server.stop.send(()).unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), server.task).await;
    assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
}

#[tokio::test]
async fn client_without_a_certificate_is_refused_and_the_server_keeps_serving() {
    let pki = new_pki();
    let server_pem = pki.tls_pem(Role::Allocator, "alloc-1").unwrap();
    let server = start(Some(&server_pem), AuthMode::MutualTls, &Role::ALL).await;

    ensure_crypto_provider();
    let anonymous = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca_cert_pem))
        .domain_name("127.0.0.1");
    let channel = Endpoint::from_shared(format!("https://{}", server.addr))
        .unwrap()
        .tls_config(anonymous)
        .unwrap()
        .timeout(Duration::from_secs(2))
        .connect_lazy();
    let refused = call(channel, "d").await.unwrap_err();
    assert_ne!(refused.code(), Code::Ok);
    assert_eq!(
        server.calls.load(Ordering::SeqCst),
        0,
        "handler ran: {refused:?}"
    );

    let agent = mtls_channel(pki.tls_pem(Role::Agent, "gw-1").unwrap(), server.addr);
    assert_eq!(call(agent, "d").await.unwrap(), "agent/gw-1");
}

#[tokio::test]
async fn client_certificate_from_another_ca_is_refused() {
    let pki = new_pki();
    let server_pem = pki.tls_pem(Role::Allocator, "alloc-1").unwrap();
    let server = start(Some(&server_pem), AuthMode::MutualTls, &Role::ALL).await;

    // Same identity, same trust domain, but issued by a CA the server does not trust.
    let rogue = new_pki();
    let rogue_cert = rogue.cert(Role::Admin, "ops").unwrap();
    let forged = TlsPem {
        ca: pki.ca_cert_pem.clone(),
        cert: rogue_cert.cert_pem.clone(),
        key: rogue_cert.key_pem.clone(),
    };
    let refused = call(mtls_channel(forged, server.addr), "d")
        .await
        .unwrap_err();
    assert_ne!(refused.code(), Code::Ok);
    assert_eq!(
        server.calls.load(Ordering::SeqCst),
        0,
        "handler ran: {refused:?}"
    );
}

#[tokio::test]
async fn client_refuses_a_server_from_another_ca() {
    let rogue = new_pki();
    let rogue_pem = rogue.tls_pem(Role::Allocator, "alloc-1").unwrap();
    let server = start(Some(&rogue_pem), AuthMode::MutualTls, &Role::ALL).await;

    let pki = new_pki();
    let agent = mtls_channel(pki.tls_pem(Role::Agent, "gw-1").unwrap(), server.addr);
    let refused = call(agent, "d").await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(server.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn admin_only_method_denies_an_agent_by_role() {
    let pki = new_pki();
    let server_pem = pki.tls_pem(Role::Allocator, "alloc-1").unwrap();
    let server = start(Some(&server_pem), AuthMode::MutualTls, &[Role::Admin]).await;

    let agent = mtls_channel(pki.tls_pem(Role::Agent, "gw-1").unwrap(), server.addr);
    let denied = call(agent, "d").await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("`agent`"), "{}", denied.message());

    let admin = mtls_channel(pki.tls_pem(Role::Admin, "ops").unwrap(), server.addr);
    assert_eq!(call(admin, "d").await.unwrap(), "admin/ops");
}

#[tokio::test]
async fn insecure_mode_assumes_its_identity_on_plaintext() {
    let assumed = PeerIdentity::new(Role::Admin, "dev").unwrap();
    let server = start(None, AuthMode::Insecure { assumed }, &[Role::Admin]).await;
    let factory = ChannelFactory::new(settings(), ClientTransport::Plaintext).unwrap();
    let channel = factory.channel(&server.addr.to_string()).unwrap();
    assert_eq!(call(channel, "d").await.unwrap(), "admin/dev");
}

#[tokio::test]
async fn mutual_tls_mode_on_plaintext_is_unauthenticated() {
    let server = start(None, AuthMode::MutualTls, &Role::ALL).await;
    let factory = ChannelFactory::new(settings(), ClientTransport::Plaintext).unwrap();
    let channel = factory.channel(&server.addr.to_string()).unwrap();
    let refused = call(channel, "d").await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert!(refused.message().contains("no client certificate"));
}

#[tokio::test]
async fn requests_past_the_request_timeout_are_cut_off() {
    let pki = new_pki();
    let server_pem = pki.tls_pem(Role::Allocator, "alloc-1").unwrap();
    let server = start(Some(&server_pem), AuthMode::MutualTls, &Role::ALL).await;
    let agent = mtls_channel(pki.tls_pem(Role::Agent, "gw-1").unwrap(), server.addr);
    let started = std::time::Instant::now();
    let late = call(agent, "slow").await.unwrap_err();
    // The client's timer reports CANCELLED; the server's `grpc-timeout` DEADLINE_EXCEEDED.
    assert!(
        matches!(late.code(), Code::Cancelled | Code::DeadlineExceeded),
        "{late:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_900), "{late:?}");
}
