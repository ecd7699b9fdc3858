//! The agent binary under slow and half-open clients: its listeners hold at most
//! `--connections-max` connections each, a client trickling its HTTP headers is cut off at
//! `--header-timeout-ms`, and an honest client is still served.

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
