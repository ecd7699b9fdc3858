//! The allocator binary under a client holding many half-sent lease calls: what the lease
//! and admin services buffer stays within `listener.request_bytes_buffered_max`, calls past
//! it are refused, the rest fail after `listener.request_body_timeout_ms` and give their
//! bytes back, and an admin call is served throughout.

mod h2_support;
mod process_support;

use bytes::Bytes;
use h2_support::{metric, open_streams, rss_bytes, rss_settled, Streams};
use process_support::{ctl_insecure, insecure_node_config, json, start_node};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
/// The smallest budget the allocator accepts (a backup must fit in it).
const BUDGET_BYTES: usize = 64 * MIB;
const BODY_TIMEOUT_MS: u64 = 4_000;
const CONNECTIONS: usize = 6;
const STREAMS: usize = 100;
/// Each call's message: well under the lease service's 4 MiB bound.
const MESSAGE_LEN: usize = MIB;
const PATH: &str = "/leasehold.v1.LeaseService/Acquire";
const RESOURCE_EXHAUSTED: u32 = 8;
const DEADLINE_EXCEEDED: u32 = 4;

/// `STREAMS` calls on one connection, each sending all but the last byte of a gRPC frame
/// announcing `MESSAGE_LEN` bytes.
async fn half_sent(grpc: SocketAddr) -> Streams {
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(MESSAGE_LEN as u32).to_be_bytes());
    frame.resize(5 + MESSAGE_LEN - 1, 0);
    open_streams(grpc, PATH, Bytes::from(frame), false, STREAMS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_lease_calls_pin_at_most_the_budget_and_time_out() {
    let dir = tempfile::tempdir().unwrap();
    let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}";
    let (config, server) = insecure_node_config(dir.path(), raft);
    let text = std::fs::read_to_string(&config).unwrap();
    let http: SocketAddr = text
        .lines()
        .find_map(|l| l.strip_prefix("http_addr: "))
        .unwrap()
        .parse()
        .unwrap();
    let listener = format!(
        "listener: {{request_bytes_buffered_max: {BUDGET_BYTES}, request_body_timeout_ms: {BODY_TIMEOUT_MS}}}\n"
    );
    std::fs::write(&config, text + &listener).unwrap();
    let node = start_node(&config, &server, &dir.path().join("node.log"));
    let pid = node.0.id();
    let grpc: SocketAddr = server.parse().unwrap();
    let base = rss_bytes(pid);

    let started = Instant::now();
    let attacks: Vec<_> = (0..CONNECTIONS)
        .map(|_| tokio::spawn(half_sent(grpc)))
        .collect();
    let mut held = Vec::new();
    for a in attacks {
        held.push(a.await.unwrap());
    }
    let mut peak = rss_bytes(pid);
    // An admin call while the half-sent ones hold the budget.
    let server_copy = server.clone();
    let status = tokio::task::spawn_blocking(move || ctl_insecure(&server_copy, &["status"]))
        .await
        .unwrap();
    let buffered = metric(http, "leasehold_request_bytes_buffered")
        .await
        .unwrap();
    while started.elapsed() < Duration::from_millis(BODY_TIMEOUT_MS - 500) {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attempted = CONNECTIONS * STREAMS * MESSAGE_LEN;
    // The budget, what HTTP/2 and gRPC keep around the counted bytes, and buffers of
    // refused calls freed but not yet handed back to the system.
    let margin = 3 * BUDGET_BYTES + 32 * MIB;
    eprintln!(
        "base {} MiB, peak {} MiB, {buffered} bytes counted of {attempted} sent",
        base / MIB,
        peak / MIB
    );
    assert!(
        peak < base + margin,
        "resident memory rose {} MiB with {} MiB half-sent; bound {} MiB",
        (peak - base) / MIB,
        attempted / MIB,
        margin / MIB
    );
    assert!(buffered as usize <= BUDGET_BYTES, "{buffered}");
    assert!(status.status.success(), "{status:?}");
    assert_eq!(json(&status)["healthy"], serde_json::Value::Bool(true));

    let mut codes = Vec::new();
    for (_sends, answers) in &mut held {
        for a in answers.drain(..) {
            let code = tokio::time::timeout(Duration::from_secs(10), a).await;
            codes.push(code.expect("a half-sent call was never answered").unwrap());
        }
    }
    let count = |c| codes.iter().filter(|x| **x == Some(c)).count();
    let (refused, timed_out) = (count(RESOURCE_EXHAUSTED), count(DEADLINE_EXCEEDED));
    eprintln!("{refused} refused, {timed_out} timed out");
    assert_eq!(refused + timed_out, codes.len(), "{codes:?}");
    assert!(refused > 0 && timed_out > 0, "{refused} {timed_out}");
    assert_eq!(
        metric(http, "leasehold_request_bytes_buffered").await,
        Some(0)
    );
    assert_eq!(
        metric(http, "leasehold_request_budget_refused_total").await,
        Some(refused as u64)
    );

    // The memory the refused and timed-out calls held is back with the system. (These
    // buffers are large enough for malloc to map and unmap them on their own; the node's
    // periodic trim matters for bursts of smaller calls, as the agent's tests show.)
    drop(held);
    let (after, waited) = rss_settled(pid, base, 16 * MIB, Duration::from_secs(11)).await;
    eprintln!("{} MiB {:?} after the calls ended", after / MIB, waited);
    assert!(
        after <= base + 16 * MIB,
        "resident memory still {} MiB above its baseline after the calls ended",
        (after - base) / MIB
    );
}

/// A lease call whose body is not a protobuf message is the caller's error, not the
/// server's: `INVALID_ARGUMENT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_decode_is_an_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}";
    let (config, server) = insecure_node_config(dir.path(), raft);
    let _node = start_node(&config, &server, &dir.path().join("node.log"));
    // A gRPC frame of three bytes that are no protobuf message (a field of wire type 7).
    let garbage = Bytes::from_static(&[0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
    let (_sends, answers) = open_streams(server.parse().unwrap(), PATH, garbage, true, 1).await;
    for a in answers {
        assert_eq!(a.await.unwrap(), Some(3), "INVALID_ARGUMENT");
    }
}
