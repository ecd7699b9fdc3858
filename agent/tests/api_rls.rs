//! The agent's Envoy RLS and HTTP APIs over real sockets, and the standalone binary.

use leasehold_agent::api::http;
use leasehold_agent::api::rls::{rls_service, RlsServer};
use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMITS: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 3, name: per-tenant}\n  - key: tenant\n    value: vip\n    rate_limit: {unlimited: true}\n  - key: org\n    descriptors:\n      - key: plan\n        value: free\n        rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: path\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n";

fn engine() -> (Arc<Engine>, SystemClock) {
    let envoy = EnvoyConfig::from_yaml("edge.yaml", LIMITS).unwrap();
    let mut rules = RuleSource::from_policies(Vec::new());
    rules.envoy = Some(envoy);
    let clock = SystemClock::new();
    // The server's clock starts on an hour of UNIX time: the windows these tests count in
    // start with them instead of wherever the real clock is.
    let hour = jiff::Timestamp::from_second(1_772_323_200).unwrap();
    let engine = Engine::builder()
        .start(clock.now())
        .wall_clock(move || hour)
        .build(rules)
        .unwrap();
    (Arc::new(engine), clock)
}

async fn start_rls() -> SocketAddr {
    let (engine, clock) = engine();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = rls_service(RlsServer::new(engine, clock, true));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        limit: None,
        hits_addend: hits,
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: hits,
    }
}

#[tokio::test]
async fn envoy_rls_limits_in_order_with_hits_and_nested_rules() {
    let addr = start_rls().await;
    let mut c = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let acme = || descriptor(&[("tenant", "acme")], None);
    // Three per minute: OK, OK (hits 2 at descriptor level takes the rest), then over.
    let r = c
        .should_rate_limit(request(vec![acme()], 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    let s = &r.statuses[0];
    let limit = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (3, Unit::Minute as i32, "per-tenant")
    );
    assert_eq!(s.limit_remaining, 2);
    assert!(r
        .response_headers_to_add
        .iter()
        .any(|h| h.key == "RateLimit-Limit" && h.value == "3"));
    let r = c
        .should_rate_limit(request(vec![descriptor(&[("tenant", "acme")], Some(2))], 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.statuses[0].limit_remaining, 0);
    // Statuses keep request order: unlimited VIP, no-rule, over-limit acme, nested rule.
    let r = c
        .should_rate_limit(request(
            vec![
                descriptor(&[("tenant", "vip")], None),
                descriptor(&[("unknown", "x")], None),
                acme(),
                descriptor(&[("org", "o1"), ("plan", "free")], None),
            ],
            0,
        ))
        .await
        .unwrap()
        .into_inner();
    let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
    assert_eq!(
        codes,
        vec![
            Code::Ok as i32,
            Code::Ok as i32,
            Code::OverLimit as i32,
            Code::Ok as i32
        ]
    );
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert!(r.statuses[1].current_limit.is_none(), "no rule, no limit");
    assert!(r.statuses[2].duration_until_reset.is_some());
    // Request-level hits_addend: the nested hourly rule (2) is spent by 2 more hits.
    let nested = || descriptor(&[("org", "o1"), ("plan", "free")], None);
    let r = c
        .should_rate_limit(request(vec![nested()], 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.statuses[0].code,
        Code::OverLimit as i32,
        "1 + 2 hits exceed 2 per hour"
    );
    // Shadow mode answers OK even over the limit.
    for _ in 0..3 {
        let r = c
            .should_rate_limit(request(vec![descriptor(&[("path", "/a")], None)], 0))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
}

async fn http_post(addr: SocketAddr, path: &str, body: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn http_admit_answers_429_with_retry_after_and_ratelimit_fields() {
    let (engine, clock) = engine();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, http::router(engine, clock)).await });
    let body = r#"{"dimensions":[{"domain":"edge","entries":{"tenant":"web"}}]}"#;
    for _ in 0..3 {
        let r = http_post(addr, "/v1/admit", body).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    let r = http_post(addr, "/v1/admit", body).await.to_lowercase();
    assert!(r.starts_with("http/1.1 429"), "{r}");
    assert!(r.contains("retry-after: "), "{r}");
    assert!(r.contains("ratelimit-policy: \""), "{r}");
    assert!(r.contains("ratelimit: \"") && r.contains(";r=0;t="), "{r}");
    let bad = http_post(
        addr,
        "/v1/admit",
        r#"{"dimensions":[{"domain":"edge","polcy":"x"}]}"#,
    )
    .await;
    assert!(
        bad.starts_with("HTTP/1.1 400") && bad.contains("polcy"),
        "{bad}"
    );
    let huge = format!(
        r#"{{"dimensions":[{{"domain":"edge","entries":{{"tenant":"{}"}}}}]}}"#,
        "x".repeat(http::ADMIT_BODY_LEN_MAX)
    );
    let too_large = http_post(addr, "/v1/admit", &huge).await;
    assert!(too_large.starts_with("HTTP/1.1 413"), "{too_large}");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut m = String::new();
    s.read_to_string(&mut m).await.unwrap();
    assert!(
        m.contains("leasehold_agent_rejected_units_total{policy="),
        "{m}"
    );
}

#[test]
fn standalone_binary_serves_envoy_rls_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.yaml");
    std::fs::write(&limits, LIMITS).unwrap();
    let sock = dir.path().join("rls.sock");
    let http_sock = dir.path().join("http.sock");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold-agent"))
        .args(["--standalone", "--ratelimit-config"])
        .arg(&limits)
        .arg("--grpc-addr")
        .arg(format!("unix:{}", sock.display()))
        .arg("--http-addr")
        .arg(format!("unix:{}", http_sock.display()))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let result = rt.block_on(async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while !sock.exists() {
            assert!(std::time::Instant::now() < deadline, "agent did not start");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let path = sock.clone();
        let channel = tonic::transport::Endpoint::from_static("http://agent")
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .unwrap();
        let mut c = RateLimitServiceClient::new(channel);
        c.should_rate_limit(request(vec![descriptor(&[("tenant", "t")], Some(4))], 0))
            .await
            .unwrap()
            .into_inner()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        result.overall_code,
        Code::OverLimit as i32,
        "4 hits exceed 3 per minute"
    );
}

#[tokio::test]
async fn native_admit_charges_all_dimensions_or_none() {
    use leasehold_agent::api::admit::AdmitServer;
    use leasehold_proto::leasehold::v1 as pb;
    use leasehold_proto::leasehold::v1::admit_service_client::AdmitServiceClient;
    use leasehold_proto::leasehold::v1::admit_service_server::AdmitServiceServer;
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
    let dim = |k: &str, v: &str| pb::Dimension {
        policy_id: String::new(),
        domain: "edge".into(),
        entries: vec![pb::dimension::Entry {
            key: k.into(),
            value: v.into(),
        }],
    };
    // Nested hourly rule allows 2; the tenant rule allows 3 per minute.
    let both = |id: &str| pb::AdmitRequest {
        dimensions: vec![
            dim("tenant", "t9"),
            pb::Dimension {
                entries: vec![
                    pb::dimension::Entry {
                        key: "org".into(),
                        value: "o".into(),
                    },
                    pb::dimension::Entry {
                        key: "plan".into(),
                        value: "free".into(),
                    },
                ],
                ..dim("x", "y")
            },
        ],
        decision_id: id.into(),
        ..Default::default()
    };
    for _ in 0..2 {
        assert!(c.admit(both("req-1")).await.unwrap().into_inner().allowed);
    }
    let third = c.admit(both("req-3")).await.unwrap().into_inner();
    assert!(!third.allowed, "the hourly dimension is spent");
    assert!(
        third.decision_id.starts_with("req-3/"),
        "{}",
        third.decision_id
    );
    assert_eq!(third.results[1].reason, pb::Reason::OverLimit as i32);
    // The refused request charged nothing on the tenant dimension: one unit is still left.
    let alone = pb::AdmitRequest {
        dimensions: vec![dim("tenant", "t9")],
        ..Default::default()
    };
    let r = c.admit(alone).await.unwrap().into_inner();
    assert!(r.allowed);
    assert_eq!(r.results[0].remaining, 0);
    let err = c.admit(pb::AdmitRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

/// A message over the size bound is refused before it is buffered whole: one connection
/// of many streams cannot pin megabytes each.
#[tokio::test]
async fn a_message_over_the_size_bound_is_refused() {
    use leasehold_agent::api::listen::GRPC_MESSAGE_LEN_MAX;
    let addr = start_rls().await;
    let mut c = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let big = "x".repeat(GRPC_MESSAGE_LEN_MAX);
    let refused = c
        .should_rate_limit(request(vec![descriptor(&[("tenant", &big)], None)], 1))
        .await
        .expect_err("a message over the bound");
    assert!(
        matches!(
            refused.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{refused:?}"
    );
    let fine = c
        .should_rate_limit(request(vec![descriptor(&[("tenant", "web")], None)], 1))
        .await;
    assert!(fine.is_ok(), "the connection still serves: {fine:?}");
}
