//! The agent binary's memory under clients sending large gRPC requests: half-sent calls
//! on many HTTP/2 streams pin no more than `--request-bytes-buffered-max`, fail after
//! `--request-body-timeout-ms` and give their bytes back, an honest call is served
//! throughout, and resident memory returns near its baseline after a burst.

#[path = "../../allocator/tests/h2_support/mod.rs"]
mod h2_support;

use bytes::Bytes;
use h2_support::{open_streams, rss_bytes, rss_settled, Streams};
use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
/// The agent's budget in the half-sent test.
const BUDGET_BYTES: usize = 8 * MIB;
const BODY_TIMEOUT_MS: u64 = 5_000;
/// Connections of the attacker, each with as many streams as the agent allows.
const CONNECTIONS: usize = 6;
const STREAMS: usize = 256;
/// Just under the agent's 64 KiB message bound, with its 5-byte gRPC prefix.
const MESSAGE_LEN: usize = 64 * 1024 - 64;
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// Repeated to make an honest call's descriptor value.
const HONEST_TENANT: &str = "gw-1/path/";
/// Small half-sent calls beside the large ones, each one frame of 1 KiB: enough of them to
/// take any room the large ones leave (less than one 16 KiB frame).
const SMALL_STREAMS: usize = 64;
const SMALL_CALL_LEN: usize = 1024;
const RESOURCE_EXHAUSTED: u32 = 8;
const DEADLINE_EXCEEDED: u32 = 4;

/// One test at a time: both load the machine, and each measures its own agent's memory.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

struct Agent {
    child: Child,
    grpc: SocketAddr,
    http: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(budget_bytes: usize) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.yaml");
    std::fs::write(
        &limits,
        "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
    )
    .unwrap();
    let (grpc, http) = (free_addr(), free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold-agent"))
        .args(["--standalone", "--ratelimit-config"])
        .arg(&limits)
        .args(["--grpc-addr", &grpc.to_string()])
        .args(["--http-addr", &http.to_string()])
        .args(["--request-bytes-buffered-max", &budget_bytes.to_string()])
        .args(["--request-body-timeout-ms", &BODY_TIMEOUT_MS.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let agent = Agent {
        child,
        grpc,
        http,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(http, "request_bytes_buffered").await.is_none() {
        assert!(Instant::now() < deadline, "agent did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent
}

/// One of the agent's metrics, read from `/metrics`.
async fn metric(http: SocketAddr, name: &str) -> Option<u64> {
    h2_support::metric(http, &format!("leasehold_agent_{name}")).await
}

/// A rate-limit call of 1.5 KiB, as Envoy sends with a few descriptors, answered OK.
async fn honest_call(grpc: SocketAddr) -> Result<(), tonic::Status> {
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let r = client
        .should_rate_limit(request(&HONEST_TENANT.repeat(100)))
        .await?
        .into_inner();
    assert_eq!(r.overall_code, 1, "{r:?}");
    Ok(())
}

fn request(tenant: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: tenant.into(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 1,
    }
}

/// A gRPC frame of a rate-limit request of about `len` bytes.
fn call_frame(len: usize) -> Bytes {
    let message = request(&"x".repeat(len - 32)).encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    Bytes::from(frame)
}

/// `count` calls of the rate-limit method on one connection, each sending `body`.
async fn streams(grpc: SocketAddr, body: Bytes, complete: bool, count: usize) -> Streams {
    open_streams(grpc, PATH, body, complete, count).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_calls_pin_at_most_the_budget_and_time_out() {
    let _serial = SERIAL.lock().await;
    let agent = start(BUDGET_BYTES).await;
    let pid = agent.child.id();
    honest_call(agent.grpc).await.unwrap();
    let base = rss_bytes(pid);

    // All but the last byte of a call just under the message bound, on every stream.
    let mut whole = call_frame(MESSAGE_LEN);
    let half = whole.split_to(whole.len() - 1);
    let started = Instant::now();
    let mut open = Vec::new();
    for _ in 0..CONNECTIONS {
        open.push(tokio::spawn(streams(
            agent.grpc,
            half.clone(),
            false,
            STREAMS,
        )));
    }
    let mut held = Vec::new();
    for c in open {
        held.push(c.await.unwrap());
    }
    // Once the large calls have taken all they may, small ones take whatever is left.
    let mut peak = 0;
    let mut last = 0;
    loop {
        peak = peak.max(rss_bytes(pid));
        let buffered = metric(agent.http, "request_bytes_buffered").await.unwrap();
        if buffered > 0 && buffered == last {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_millis(BODY_TIMEOUT_MS - 1_500),
            "the half-sent calls' bytes were still being counted: {buffered}"
        );
        last = buffered;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = started.elapsed();
    let mut small = call_frame(SMALL_CALL_LEN);
    let small = small.split_to(small.len() - 1);
    held.push(streams(agent.grpc, small.clone(), false, SMALL_STREAMS).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let during = honest_call(agent.grpc).await;
    while started.elapsed() < Duration::from_millis(BODY_TIMEOUT_MS - 500) {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let buffered = metric(agent.http, "request_bytes_buffered").await.unwrap();
    let attempted = CONNECTIONS * STREAMS * half.len() + SMALL_STREAMS * small.len();
    // The budget itself, what the HTTP/2 and gRPC layers keep around the counted bytes
    // (decode buffers grow by doubling), per-stream state, and the buffers of refused calls,
    // freed but not yet handed back to the system.
    let margin = 4 * BUDGET_BYTES + 24 * MIB;
    eprintln!(
        "half-sent: base {} KiB, peak {} KiB (+{} KiB), {buffered} bytes counted of \
         {attempted} sent (settled after {settled:?}), bound +{} KiB",
        base / 1024,
        peak / 1024,
        peak.saturating_sub(base) / 1024,
        margin / 1024
    );
    assert!(
        peak < base + margin,
        "resident memory rose {} MiB with {attempted} bytes half-sent; bound {} MiB",
        (peak - base) / MIB,
        margin / MIB
    );
    assert!(buffered as usize <= BUDGET_BYTES, "{buffered}");
    during.expect("an honest call failed while half-sent calls held the budget");

    // Past the body timeout every half-sent call has failed and given its bytes back.
    let mut codes = Vec::new();
    for (_sends, answers) in &mut held {
        for a in answers.drain(..) {
            let code = tokio::time::timeout(Duration::from_secs(5), a).await;
            codes.push(code.expect("a half-sent call was never answered").unwrap());
        }
    }
    let refused = codes
        .iter()
        .filter(|c| **c == Some(RESOURCE_EXHAUSTED))
        .count();
    let timed_out = codes
        .iter()
        .filter(|c| **c == Some(DEADLINE_EXCEEDED))
        .count();
    eprintln!(
        "{refused} refused, {timed_out} timed out after {:?}",
        started.elapsed()
    );
    assert_eq!(refused + timed_out, codes.len(), "{codes:?}");
    assert!(refused > 0 && timed_out > 0, "{refused} {timed_out}");
    assert_eq!(metric(agent.http, "request_bytes_buffered").await, Some(0));
    assert_eq!(
        metric(agent.http, "request_budget_refused_total").await,
        Some(refused as u64)
    );
    honest_call(agent.grpc).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resident_memory_returns_after_a_burst_of_large_calls() {
    let _serial = SERIAL.lock().await;
    // A budget big enough for the whole burst at once, so that it is the burst, not the
    // budget, that sets the peak.
    let agent = start(256 * MIB).await;
    let pid = agent.child.id();
    honest_call(agent.grpc).await.unwrap();
    let base = rss_bytes(pid);
    let call = call_frame(MESSAGE_LEN);
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = std::sync::Arc::clone(&sampling);
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_bytes(pid));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    for _round in 0..3 {
        let mut open = Vec::new();
        for _ in 0..CONNECTIONS {
            open.push(tokio::spawn(streams(
                agent.grpc,
                call.clone(),
                true,
                STREAMS,
            )));
        }
        for c in open {
            let (_sends, answers) = c.await.unwrap();
            for a in answers {
                a.await.unwrap();
            }
        }
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.await.unwrap().max(rss_bytes(pid));
    // Two trims' worth of time.
    let (after, waited) = rss_settled(pid, base, 16 * MIB, Duration::from_secs(11)).await;
    eprintln!(
        "burst: base {} KiB, peak {} KiB, {} KiB after {:?}",
        base / 1024,
        peak / 1024,
        after / 1024,
        waited
    );
    assert!(
        peak > base + 32 * MIB,
        "the burst did not raise resident memory enough to tell: {} MiB",
        (peak - base) / MIB
    );
    assert!(
        after <= base + 16 * MIB,
        "resident memory still {} MiB above its baseline {:?} after the burst (peak +{} MiB)",
        (after - base) / MIB,
        waited,
        (peak - base) / MIB
    );
    honest_call(agent.grpc).await.unwrap();
}

/// A rate-limit call whose body is not a protobuf message is the caller's error:
/// `INVALID_ARGUMENT`, not `INTERNAL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_decode_is_an_invalid_argument() {
    let _serial = SERIAL.lock().await;
    let agent = start(BUDGET_BYTES).await;
    let garbage = Bytes::from_static(&[0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
    let (_sends, answers) = streams(agent.grpc, garbage, true, 1).await;
    for a in answers {
        assert_eq!(a.await.unwrap(), Some(3), "INVALID_ARGUMENT");
    }
    honest_call(agent.grpc).await.unwrap();
}
