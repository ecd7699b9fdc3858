//! Mutual TLS on the agent's HTTP listener (the same `listen_tls` material as gRPC): a client
//! with a certificate from the configured CA is answered; one without a certificate, a
//! plaintext client, and a client that connects and stalls get nothing and hold up no one.
//! A non-local HTTP address without `listen_tls` is refused by name. Also through the binary.

use leasehold_agent::api::http;
use leasehold_agent::api::listen::{http_tls_config, serve_http, HttpLimits, ListenAddr};
use leasehold_agent::config::AgentConfig;
use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::transport::{rustls_client_config, DevPki, PkiSpec, Role, TlsPem};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

mod support;
use support::{agent_pki, free_addr, spawn_with_tls};

const HEALTH: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n";

async fn start(server: &TlsPem) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let clock = SystemClock::new();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(RuleSource::default())
            .unwrap(),
    );
    let listener = ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())
        .bind()
        .await
        .unwrap();
    let ListenAddr::Tcp(addr) = listener.local_addr().unwrap() else {
        unreachable!("bound to TCP")
    };
    let tls = http_tls_config(server).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_http(
        http::router(engine, clock),
        listener,
        Some(tls),
        HttpLimits::default(),
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stop)
}

/// A client trusting `ca`, presenting `identity`'s certificate if given.
fn client(ca: &str, identity: Option<&TlsPem>) -> TlsConnector {
    let config = match identity {
        Some(id) => rustls_client_config(id).unwrap(),
        None => {
            let mut roots = RootCertStore::empty();
            for der in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(der.unwrap()).unwrap();
            }
            let builder = ClientConfig::builder().with_root_certificates(roots);
            Arc::new(builder.with_no_client_auth())
        }
    };
    TlsConnector::from(config)
}

/// The response's text, or None if the connection gave no HTTP answer within 5 s.
async fn health(addr: SocketAddr, connector: &TlsConnector) -> Option<String> {
    let attempt = async {
        let tcp = TcpStream::connect(addr).await.ok()?;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = connector.connect(name, tcp).await.ok()?;
        tls.write_all(HEALTH).await.ok()?;
        let mut out = Vec::new();
        tls.read_to_end(&mut out).await.ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
        .filter(|r| r.starts_with("HTTP/1.1"))
}

#[tokio::test]
async fn the_http_listener_answers_clients_with_a_certificate_from_its_ca_only() {
    let pki = DevPki::generate(
        &PkiSpec::local(&[], &["gw-1", "edge-proxy"], &[]),
        SystemTime::now(),
    )
    .unwrap();
    let server = pki.tls_pem(Role::Agent, "gw-1").unwrap();
    let (addr, stop) = start(&server).await;

    // Connects and never says a word: must not delay the others.
    let _stalled = TcpStream::connect(addr).await.unwrap();

    let gateway = pki.tls_pem(Role::Agent, "edge-proxy").unwrap();
    let answer = health(addr, &client(&pki.ca_cert_pem, Some(&gateway))).await;
    let answer = answer.expect("a gateway with a certificate from the CA is answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let anonymous = health(addr, &client(&pki.ca_cert_pem, None)).await;
    assert_eq!(anonymous, None, "a client without a certificate");

    let other = DevPki::generate(
        &PkiSpec::local(&[], &["edge-proxy"], &[]),
        SystemTime::now(),
    )
    .unwrap();
    let stranger = other.tls_pem(Role::Agent, "edge-proxy").unwrap();
    let foreign = health(addr, &client(&pki.ca_cert_pem, Some(&stranger))).await;
    assert_eq!(foreign, None, "a certificate from another CA");

    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain.write_all(HEALTH).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut out)).await;
    assert!(
        !String::from_utf8_lossy(&out).starts_with("HTTP/1.1"),
        "a plaintext client got an HTTP answer"
    );
    let _ = stop.send(());
}

#[test]
fn a_non_local_http_address_needs_listen_tls_or_listen_insecure() {
    let open = AgentConfig {
        standalone: true,
        http_addr: "0.0.0.0:9080".into(),
        ..AgentConfig::default()
    };
    let err = open.validate().unwrap_err().to_string();
    assert!(
        err.contains("http_addr") && err.contains("listen_tls"),
        "{err}"
    );
    let insecure = AgentConfig {
        listen_insecure: true,
        ..open
    };
    insecure.validate().unwrap();
}

#[tokio::test]
async fn the_binary_serves_http_over_mutual_tls_given_the_tls_flags() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, tls) = agent_pki(dir.path());
    let addr = free_addr();
    let grpc = format!("unix:{}", dir.path().join("grpc.sock").display());
    let http = addr.to_string();
    let _running = spawn_with_tls(
        &["--standalone", "--grpc-addr", &grpc, "--http-addr", &http],
        &tls,
    );
    let gateway = pki.tls_pem(Role::Agent, "edge-proxy").unwrap();
    let connector = client(&pki.ca_cert_pem, Some(&gateway));
    let started = std::time::Instant::now();
    let answer = loop {
        match health(addr, &connector).await {
            Some(answer) => break answer,
            None if started.elapsed() > Duration::from_secs(10) => panic!("never answered"),
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let anonymous = health(addr, &client(&pki.ca_cert_pem, None)).await;
    assert_eq!(anonymous, None, "a client without a certificate");
}
