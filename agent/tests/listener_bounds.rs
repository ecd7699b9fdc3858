//! The agent binary under slow and half-open clients: its listeners hold at most
//! `--connections-max` connections each, a client trickling its HTTP headers is cut off at
//! `--header-timeout-ms`, and an honest client is still served.

use leasehold_agent::api::listen::CONNECTION_AGE_GRACE_MS;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONNECTIONS_MAX: usize = 16;
const SLOW_CLIENTS: usize = 100;

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(grpc: SocketAddr, http: SocketAddr, dir: &std::path::Path) -> Agent {
    start_with(grpc, http, dir, &[])
}

fn start_with(grpc: SocketAddr, http: SocketAddr, dir: &std::path::Path, extra: &[&str]) -> Agent {
    let limits = dir.join("limits.yaml");
    std::fs::write(
        &limits,
        "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold-agent"))
        .args(["--standalone", "--ratelimit-config"])
        .arg(&limits)
        .args(["--grpc-addr", &grpc.to_string()])
        .args(["--http-addr", &http.to_string()])
        .args(["--connections-max", &CONNECTIONS_MAX.to_string()])
        .args(["--header-timeout-ms", "500", "--idle-timeout-ms", "60000"])
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Agent(child)
}

async fn healthz(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Connects and sends the start of a request, then one byte every 200 ms until the
/// server closes the connection or `until` passes.
async fn trickle(addr: SocketAddr, start: &'static [u8], until: Instant) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return;
    };
    if s.write_all(start).await.is_err() {
        return;
    }
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if s.write_all(b"x").await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_cost_bounded_sockets_and_an_honest_client_is_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_addr(), free_addr());
    let agent = start(grpc, http, dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while healthz(http).await.is_err() {
        assert!(Instant::now() < deadline, "agent did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle_files = open_files(agent.0.id());

    let until = Instant::now() + Duration::from_secs(6);
    let mut slow = Vec::new();
    for _ in 0..SLOW_CLIENTS {
        slow.push(tokio::spawn(trickle(
            http,
            b"GET /healthz HTTP/1.1\r\n",
            until,
        )));
        slow.push(tokio::spawn(trickle(grpc, b"PRI * HTTP/2.0\r\n", until)));
    }
    // Both listeners full of slow clients: never more than their caps in sockets.
    let mut most = 0;
    let mut served = None;
    let started = Instant::now();
    while Instant::now() < until {
        most = most.max(open_files(agent.0.id()));
        if served.is_none() {
            let honest = tokio::time::timeout(Duration::from_millis(1000), healthz(http)).await;
            if let Ok(Ok(answer)) = honest {
                assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                served = Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in slow {
        t.await.unwrap();
    }
    assert!(
        most <= idle_files + 2 * CONNECTIONS_MAX + 1,
        "{most} files open with {SLOW_CLIENTS} slow clients per listener \
         ({idle_files} idle, cap {CONNECTIONS_MAX} per listener)"
    );
    let served = served.expect("an honest HTTP client was never served while slow ones trickled");
    assert!(served < Duration::from_secs(6), "{served:?}");
}

/// The age bound of the tests below, in milliseconds.
const AGE_MS: u64 = 1_000;

/// An agent whose gRPC connections are asked to go away after [`AGE_MS`], serving; its
/// gRPC address.
async fn aging_agent() -> (Agent, SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_addr(), free_addr());
    let agent = start_with(
        grpc,
        http,
        dir.path(),
        &["--connection-age-max-ms", &AGE_MS.to_string()],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while healthz(http).await.is_err() {
        assert!(Instant::now() < deadline, "agent did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (agent, grpc, dir)
}

/// An HTTP/2 client that keeps its connection busy without ever making a call: the
/// connection preface, then a PING every 300 ms. The idle timeout never fires for it; the
/// connection's age bound must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_kept_busy_without_calls_is_closed_at_its_age_bound() {
    let (_agent, grpc, _dir) = aging_agent().await;
    let s = TcpStream::connect(grpc).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let started = Instant::now();
    let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
    let settings_ack = [0u8, 0, 0, 4, 1, 0, 0, 0, 0];
    wr.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    wr.write_all(&settings).await.unwrap();
    wr.write_all(&settings_ack).await.unwrap();
    // Reads (PING acknowledgements) until the server closes.
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(1..) = rd.read(&mut buf).await {}
        started.elapsed()
    });
    let ping = [0u8, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let mut open_at_age = false;
    while !reader.is_finished() && started.elapsed() < Duration::from_secs(20) {
        if wr.write_all(&ping).await.is_err() {
            break;
        }
        if started.elapsed() < Duration::from_millis(AGE_MS * 9 / 10) {
            open_at_age = true;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let closed_after = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the connection was still open 20 s after it was made")
        .unwrap();
    eprintln!("closed after {closed_after:?}");
    assert!(
        open_at_age,
        "the connection was served before its age bound"
    );
    assert!(
        closed_after >= Duration::from_millis(AGE_MS),
        "closed after {closed_after:?}, before its age bound"
    );
    let bound =
        Duration::from_millis(AGE_MS + leasehold_agent::api::listen::CONNECTION_AGE_GRACE_MS);
    assert!(
        closed_after <= bound + Duration::from_secs(3),
        "closed after {closed_after:?}; age and grace are {bound:?}"
    );
}

/// A gateway calling all along is not hurt by the age bound: when its connection is asked
/// to go away, its client reconnects and every call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_on_across_the_age_bound() {
    use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
    let (_agent, grpc, _dir) = aging_agent().await;
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let request = || RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: "acme".into(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 1,
    };
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut calls = 0;
    while started.elapsed() < Duration::from_millis(AGE_MS + CONNECTION_AGE_GRACE_MS + 2_000) {
        calls += 1;
        if let Err(status) = client.should_rate_limit(request()).await {
            failures.push((started.elapsed(), status));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        failures.is_empty(),
        "{} of {calls} calls failed: {failures:?}",
        failures.len()
    );
}
