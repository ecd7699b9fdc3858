//! For the tests of request budgets on the binaries: raw HTTP/2 gRPC calls (many streams
//! on one connection, each sending a body that may stop short of its end, and each call's
//! gRPC status), a process's resident memory and a figure from its `/metrics`.
//! Shared with the agent's memory tests, which include this file by path.

#![allow(dead_code)]

use bytes::Bytes;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The send halves of open streams (kept so half-sent ones stay open) and their answers.
pub type Streams = (
    Vec<h2::SendStream<Bytes>>,
    Vec<tokio::task::JoinHandle<Option<u32>>>,
);

/// The gRPC status of an answer (`None`: no status, or the stream was reset).
pub async fn grpc_status(resp: h2::client::ResponseFuture) -> Option<u32> {
    let resp = resp.await.ok()?;
    let code = |h: &http::HeaderMap| h.get("grpc-status")?.to_str().ok()?.parse().ok();
    if let Some(c) = code(resp.headers()) {
        return Some(c);
    }
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        chunk.ok()?;
    }
    code(&body.trailers().await.ok()??)
}

/// `count` calls of `path` on one new connection to `addr`, each sending `body` (ending
/// the stream only when `complete`).
pub async fn open_streams(
    addr: SocketAddr,
    path: &str,
    body: Bytes,
    complete: bool,
    count: usize,
) -> Streams {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    // The server's SETTINGS (its stream bound) arrive before the first stream goes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (mut sends, mut answers) = (Vec::new(), Vec::new());
    for _ in 0..count {
        client = client.ready().await.unwrap();
        let req = http::Request::post(path)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut send) = client.send_request(req, false).unwrap();
        send.reserve_capacity(body.len());
        send.send_data(body.clone(), complete).unwrap();
        sends.push(send);
        answers.push(tokio::spawn(grpc_status(resp)));
    }
    (sends, answers)
}

/// Resident memory of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The value of the unlabelled metric `name` on the `/metrics` of the HTTP listener at
/// `http`; None while it does not answer or lacks the metric.
pub async fn metric(http: SocketAddr, name: &str) -> Option<u64> {
    let mut s = TcpStream::connect(http).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// Resident memory of `pid` once it is within `slack` bytes of `base`, or after `within`
/// if it never gets there; and how long that took.
pub async fn rss_settled(
    pid: u32,
    base: usize,
    slack: usize,
    within: Duration,
) -> (usize, Duration) {
    let started = std::time::Instant::now();
    let mut rss = rss_bytes(pid);
    while started.elapsed() < within && rss > base + slack {
        tokio::time::sleep(Duration::from_millis(250)).await;
        rss = rss_bytes(pid);
    }
    (rss, started.elapsed())
}
