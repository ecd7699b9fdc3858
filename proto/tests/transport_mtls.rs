//! Mutual TLS on real loopback sockets: identities come from client certificates, and a
//! client without a certificate, with one from another CA, or with the wrong role is
//! refused.

use leasehold_proto::envoy::config::core::v3::HeaderValue;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use leasehold_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use leasehold_proto::transport::{
    serve_router, server_builder, AuthMode, ChannelFactory, ChannelSettings, ClientTransport,
    DevPki, PkiSpec, Role, TlsPem,
};
use std::net::SocketAddr;
use std::time::SystemTime;
use tonic::{Request, Response, Status};

/// Answers with the caller's identity in a header; domain `admin` requires the admin role.
struct WhoAmI {
    auth: AuthMode,
}

#[tonic::async_trait]
impl RateLimitService for WhoAmI {
    async fn should_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let identity = if req.get_ref().domain == "admin" {
            self.auth.authorize(&req, &[Role::Admin])?
        } else {
            self.auth.identify(&req)?
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            response_headers_to_add: vec![HeaderValue {
                key: "x-caller".into(),
                value: identity.to_string(),
                raw_value: Vec::new(),
            }],
            ..Default::default()
        }))
    }
}

fn pki() -> DevPki {
    DevPki::generate(
        &PkiSpec::local(&["alloc-1"], &["gw-1"], &["ops"]),
        SystemTime::now(),
    )
    .expect("dev PKI")
}

async fn start(server: &TlsPem) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = server_builder(Some(server))
        .expect("server TLS")
        .add_service(RateLimitServiceServer::new(WhoAmI {
            auth: AuthMode::MutualTls,
        }));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_router(router, listener, async {
        let _ = rx.await;
    }));
    (addr, tx)
}

fn client(
    addr: SocketAddr,
    transport: ClientTransport,
) -> RateLimitServiceClient<tonic::transport::Channel> {
    let factory = ChannelFactory::new(ChannelSettings::default(), transport).expect("factory");
    RateLimitServiceClient::new(factory.channel(&addr.to_string()).expect("channel"))
}

fn ask(domain: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        ..Default::default()
    }
}

fn mtls(pem: TlsPem) -> ClientTransport {
    ClientTransport::MutualTls {
        pem,
        server_name: Some("localhost".into()),
    }
}

#[tokio::test]
async fn agent_certificate_is_seen_as_agent_and_refused_admin() {
    let pki = pki();
    let (addr, _stop) = start(&pki.tls_pem(Role::Allocator, "alloc-1").unwrap()).await;
    let mut agent = client(addr, mtls(pki.tls_pem(Role::Agent, "gw-1").unwrap()));
    let resp = agent
        .should_rate_limit(ask("edge"))
        .await
        .expect("agent call");
    let caller = &resp.get_ref().response_headers_to_add[0].value;
    assert!(
        caller.contains("agent") && caller.contains("gw-1"),
        "{caller}"
    );
    let denied = agent.should_rate_limit(ask("admin")).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied}");
    let mut admin = client(addr, mtls(pki.tls_pem(Role::Admin, "ops").unwrap()));
    admin
        .should_rate_limit(ask("admin"))
        .await
        .expect("admin may");
}

#[tokio::test]
async fn client_without_certificate_is_refused() {
    let pki = pki();
    let (addr, _stop) = start(&pki.tls_pem(Role::Allocator, "alloc-1").unwrap()).await;
    // Plaintext against a TLS server, and TLS without a client identity, both fail.
    let mut plain = client(addr, ClientTransport::Plaintext);
    assert!(plain.should_rate_limit(ask("edge")).await.is_err());
    leasehold_proto::transport::ensure_crypto_provider();
    let anonymous = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            pki.tls_pem(Role::Agent, "gw-1").unwrap().ca,
        ))
        .domain_name("localhost");
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(anonymous)
        .unwrap()
        .connect_lazy();
    let err = RateLimitServiceClient::new(channel)
        .should_rate_limit(ask("edge"))
        .await
        .unwrap_err();
    assert_ne!(err.code(), tonic::Code::Ok);
}

#[tokio::test]
async fn certificate_from_another_ca_is_refused() {
    let (ours, theirs) = (pki(), pki());
    let (addr, _stop) = start(&ours.tls_pem(Role::Allocator, "alloc-1").unwrap()).await;
    let mut stranger_pem = theirs.tls_pem(Role::Agent, "gw-1").unwrap();
    // The stranger trusts our CA (so it accepts the server) but its own cert is foreign.
    stranger_pem.ca = ours.tls_pem(Role::Agent, "gw-1").unwrap().ca;
    let mut stranger = client(addr, mtls(stranger_pem));
    assert!(stranger.should_rate_limit(ask("edge")).await.is_err());
}

#[test]
fn written_pki_refuses_to_overwrite_and_protects_keys() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let pki = pki();
    let files = pki.write_to(dir.path(), false).expect("first write");
    assert!(files.iter().any(|f| f.ends_with("ca.pem")));
    for f in files
        .iter()
        .filter(|f| f.to_string_lossy().ends_with("-key.pem"))
    {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    assert!(
        pki.write_to(dir.path(), false).is_err(),
        "must not overwrite"
    );
    pki.write_to(dir.path(), true).expect("force overwrites");
}
