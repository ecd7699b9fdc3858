//! Shaping through the agent's HTTP and native gRPC APIs over real sockets: a delay
//! within `max_delay` is answered as allowed with `delay_ms`, beyond it as a refusal; a
//! caller that does not accept a delay is refused as without shaping; the binary's
//! `--shaped-waiting-max`.

mod support;

use leasehold_agent::api::admit::AdmitServer;
use leasehold_agent::api::http;
use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admit_service_client::AdmitServiceClient;
use leasehold_proto::leasehold::v1::admit_service_server::AdmitServiceServer;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{agent, free_addr, Running};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One unit every 10 s, shaped up to 15 s: the second request waits about 10 s, the third
/// would wait about 20 s. Seconds apart, so a slow test machine changes no answer.
const SHAPED: &str = "id: api\ndimensions: [{name: tenant, required: true}]\n\
    rate: {units: 1, per: 10s}\nburst: 1\nscope: process\nshape: {max_delay: 15s}\n";

fn engine() -> (Arc<Engine>, SystemClock) {
    let policy = Policy::from_yaml(SHAPED).unwrap();
    let clock = SystemClock::new();
    let engine = Engine::builder()
        .start(clock.now())
        .build(RuleSource::from_policies(vec![policy]))
        .unwrap();
    (Arc::new(engine), clock)
}

async fn http_post(addr: SocketAddr, body: &str) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/admit HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let json = out.split("\r\n\r\n").nth(1).unwrap();
    (status, serde_json::from_str(json).unwrap())
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

fn ms(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

#[tokio::test]
async fn http_answers_a_delay_then_refuses_beyond_max_delay() {
    let (engine, clock) = engine();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, http::router(engine, clock)).await });
    let waits =
        r#"{"dimensions":[{"policy":"api","entries":{"tenant":"acme"}}],"accept_delay":true}"#;
    let no_wait = r#"{"dimensions":[{"policy":"api","entries":{"tenant":"acme"}}]}"#;

    let (status, first) = http_post(addr, waits).await;
    assert_eq!((status, ms(&first, "delay_ms")), (200, 0), "{first}");
    // A caller that does not wait is refused, and charged nothing.
    let (status, refused) = http_post(addr, no_wait).await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(ms(&refused, "delay_ms"), 0);

    let (status, second) = http_post(addr, waits).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["allowed"], true);
    let delay = ms(&second, "delay_ms");
    assert!((5_000..=10_000).contains(&delay), "{second}");

    let (status, third) = http_post(addr, waits).await;
    assert_eq!(status, 429, "about 20 s is beyond 15 s: {third}");
    assert_eq!(ms(&third, "delay_ms"), 0);
    // From about 5 s on, the unit at about 20 s is within the bound.
    assert!(
        (1..=5_000).contains(&ms(&third, "retry_after_ms")),
        "{third}"
    );

    let metrics = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("leasehold_agent_shaped_admitted_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("leasehold_agent_shaped_waiting_full_total 0\n"),
        "{metrics}"
    );
}

#[tokio::test]
async fn native_admit_answers_a_delay_then_refuses_beyond_max_delay() {
    let (engine, clock) = engine();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AdmitServiceServer::new(AdmitServer::new(engine, clock)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut c = AdmitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let request = |accept_delay| pb::AdmitRequest {
        dimensions: vec![pb::Dimension {
            policy_id: "api".into(),
            entries: vec![pb::dimension::Entry {
                key: "tenant".into(),
                value: "acme".into(),
            }],
            ..Default::default()
        }],
        accept_delay,
        ..Default::default()
    };
    let first = c.admit(request(true)).await.unwrap().into_inner();
    assert!(first.allowed);
    assert_eq!(first.delay_ms, 0);
    let refused = c.admit(request(false)).await.unwrap().into_inner();
    assert!(!refused.allowed);
    assert_eq!(refused.results[0].reason, pb::Reason::OverLimit as i32);
    let second = c.admit(request(true)).await.unwrap().into_inner();
    assert!(second.allowed);
    assert!((5_000..=10_000).contains(&second.delay_ms), "{second:?}");
    assert_eq!(second.results[0].reason, pb::Reason::Ok as i32);
    let third = c.admit(request(true)).await.unwrap().into_inner();
    assert!(!third.allowed, "{third:?}");
    assert_eq!(third.delay_ms, 0);
    assert!((1..=5_000).contains(&third.retry_after_ms), "{third:?}");
}

/// The `leasehold-agent` binary with a shaping policy and room for one waiting request:
/// the second request waits about 10 s; the third, whose 20 s are within the policy's 30 s,
/// is refused because the one place is taken, and counted.
#[tokio::test]
async fn the_binary_caps_the_requests_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api.yaml");
    std::fs::write(&file, SHAPED.replace("max_delay: 15s", "max_delay: 30s")).unwrap();
    let http = free_addr();
    let (grpc, http_s) = (free_addr().to_string(), http.to_string());
    let args = [
        "--standalone",
        "--policy",
        file.to_str().unwrap(),
        "--grpc-addr",
        &grpc,
        "--http-addr",
        &http_s,
        "--shaped-waiting-max",
        "1",
    ];
    let child = agent(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(http).await.is_err() {
        assert!(Instant::now() < deadline, "the agent never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waits =
        r#"{"dimensions":[{"policy":"api","entries":{"tenant":"acme"}}],"accept_delay":true}"#;
    let (status, first) = http_post(http, waits).await;
    assert_eq!((status, ms(&first, "delay_ms")), (200, 0), "{first}");
    let (status, second) = http_post(http, waits).await;
    assert_eq!(status, 200, "{second}");
    assert!(
        (5_000..=10_000).contains(&ms(&second, "delay_ms")),
        "{second}"
    );
    let (status, third) = http_post(http, waits).await;
    assert_eq!(status, 429, "the one waiting place is taken: {third}");
    let metrics = http_get(http, "/metrics").await;
    for line in [
        "leasehold_agent_shaped_admitted_total 1\n",
        "leasehold_agent_shaped_waiting_full_total 1\n",
        "leasehold_agent_shaped_waiting_max 1\n",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}
