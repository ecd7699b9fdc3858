//! A standalone agent given a state file keeps every local limiter's state across a
//! restart: fixed and sliding windows, a calendar quota, a token bucket and GCRA, after
//! SIGTERM (saved as it stops) and after `kill -9` once a periodic save has run.
//!
//! Every limit is 3 per hour (per year for the quota), so the seconds the test takes
//! earn nothing back.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{agent, away_from_the_hour, free_addr, stop, Running};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Each policy's id and algorithm fields; each admits 3 per key.
const POLICIES: [(&str, &str); 5] = [
    (
        "fixed",
        "algorithm: fixed_window\nrate: {units: 3, per: 1h}\n",
    ),
    (
        "sliding",
        "algorithm: sliding_window\nrate: {units: 3, per: 1h}\n",
    ),
    (
        "quota",
        "algorithm: calendar_quota\ncalendar: {period: year, units: 3}\n",
    ),
    (
        "bucket",
        "algorithm: token_bucket\nrate: {units: 1, per: 1h}\nburst: 3\n",
    ),
    (
        "gcra",
        "algorithm: gcra\nrate: {units: 1, per: 1h}\nburst: 3\n",
    ),
];

fn start(dir: &Path, http: SocketAddr) -> Running {
    let mut args = vec![
        "--standalone".to_owned(),
        "--state-file".to_owned(),
        dir.join("state").display().to_string(),
        "--grpc-addr".to_owned(),
        free_addr().to_string(),
        "--http-addr".to_owned(),
        http.to_string(),
    ];
    for (id, fields) in POLICIES {
        let file = dir.join(format!("{id}.yaml"));
        let yaml = format!("id: {id}\ndimensions: [{{name: tenant}}]\nscope: process\n{fields}");
        std::fs::write(&file, yaml).unwrap();
        args.extend(["--policy".to_owned(), file.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = agent(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Running(child)
}

/// One request of `tenant` under `policy`: whether it was admitted.
async fn hit(http: SocketAddr, policy: &str, tenant: &str) -> bool {
    let body =
        format!(r#"{{"dimensions":[{{"policy":"{policy}","entries":{{"tenant":"{tenant}"}}}}]}}"#);
    let req = format!(
        "POST /v1/admit HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    match out.get(..12) {
        Some("HTTP/1.1 200") => true,
        Some("HTTP/1.1 429") => false,
        _ => panic!("{policy}/{tenant}: {out}"),
    }
}

/// Requests of `tenant` under `policy` until one is refused (at most 10): how many were
/// admitted.
async fn admits(http: SocketAddr, policy: &str, tenant: &str) -> u64 {
    let mut n = 0;
    while n < 10 && hit(http, policy, tenant).await {
        n += 1;
    }
    n
}

async fn take(http: SocketAddr, tenant: &str, n: u64) {
    for (id, _) in POLICIES {
        for i in 0..n {
            assert!(hit(http, id, tenant).await, "{id}/{tenant}: hit {i} of {n}");
        }
    }
}

/// For every policy, how many `tenant` is still admitted.
async fn left(http: SocketAddr, tenant: &str) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    for (id, _) in POLICIES {
        out.push((id, admits(http, id, tenant).await));
    }
    out
}

fn each(n: u64) -> Vec<(&'static str, u64)> {
    POLICIES.iter().map(|(id, _)| (*id, n)).collect()
}

async fn ready(http: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(http).await.is_err() {
        assert!(Instant::now() < deadline, "the agent never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn every_local_limiter_survives_a_restart_with_a_state_file() {
    away_from_the_hour(120).await;
    let dir = tempfile::tempdir().unwrap();
    let http = free_addr();

    let running = start(dir.path(), http);
    ready(http).await;
    take(http, "a", 2).await;
    assert_eq!(left(http, "b").await, each(3), "b spends its all");
    stop(running, "-TERM").await;

    let running = start(dir.path(), http);
    ready(http).await;
    assert_eq!(
        left(http, "b").await,
        each(0),
        "b's state kept over SIGTERM"
    );
    take(http, "c", 2).await;
    // A periodic save (every second) carries c's use over a kill -9 as well.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    stop(running, "-9").await;

    let _running = start(dir.path(), http);
    ready(http).await;
    assert_eq!(
        left(http, "a").await,
        each(1),
        "a's state kept over two restarts"
    );
    assert_eq!(
        left(http, "c").await,
        each(1),
        "c's state kept over kill -9"
    );
    assert_eq!(left(http, "b").await, each(0));
    assert_eq!(left(http, "d").await, each(3), "other users count apart");
}
