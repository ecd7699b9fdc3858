use super::*;
use crate::transport::{limited, ListenerLimits};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn start(limits: ListenerLimits, header_timeout_ms: u64) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    tokio::spawn(serve_http1(
        limited(l, limits),
        router,
        header_timeout_ms,
        std::future::pending(),
    ));
    addr
}

async fn get(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off_at_the_header_timeout() {
    let addr = start(ListenerLimits::default(), 500).await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let mut closed_after = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if slow.write_all(b"x").await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut buf = [0u8; 256];
        let read = tokio::time::timeout(Duration::from_millis(1), slow.read(&mut buf)).await;
        if let Ok(Ok(n)) = read {
            // A 408 or a plain close: either way the connection is over.
            if n == 0 || buf[..n].starts_with(b"HTTP/1.1 408") {
                closed_after = Some(started.elapsed());
                break;
            }
        }
    }
    let closed_after = closed_after.expect("a trickling client kept its connection for 4 s");
    assert!(
        closed_after >= Duration::from_millis(400),
        "{closed_after:?}"
    );
    assert!(get(addr).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn slow_clients_holding_every_slot_but_one_leave_room_for_an_honest_one() {
    let limits = ListenerLimits {
        connections_max: 8,
        idle_timeout_ms: 60_000,
        ..ListenerLimits::default()
    };
    let addr = start(limits, 60_000).await;
    let mut slow = Vec::new();
    for _ in 0..7 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        slow.push(s);
    }
    for _ in 0..3 {
        let answer = tokio::time::timeout(Duration::from_secs(5), get(addr)).await;
        assert!(answer
            .expect("honest client starved")
            .starts_with("HTTP/1.1 200"));
    }
}

#[tokio::test]
async fn beyond_the_connection_cap_a_client_waits_until_a_slow_one_times_out() {
    let limits = ListenerLimits {
        connections_max: 4,
        idle_timeout_ms: 60_000,
        ..ListenerLimits::default()
    };
    let addr = start(limits, 700).await;
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        slow.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), get(addr)).await;
    assert!(answer.expect("never served").starts_with("HTTP/1.1 200"));
    // Served only once a slot was freed by the header timeout, not before.
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn every_request_names_the_address_its_connection_came_from() {
    use crate::transport::Peer;
    let l = TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let router = axum::Router::new().route(
        "/",
        axum::routing::get(|axum::Extension(peer): axum::Extension<Peer>| async move {
            format!("{:?} {}", peer.ip, peer.cert.is_some())
        }),
    );
    tokio::spawn(serve_http1(
        limited(l, ListenerLimits::default()),
        router,
        1_000,
        std::future::pending(),
    ));
    for from in ["127.0.0.1", "127.0.0.2"] {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let mut s = socket
            .connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.ends_with(&format!("Some({from}) false")), "{out}");
    }
}
