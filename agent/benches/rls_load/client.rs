//! A lean closed-loop gRPC client over raw HTTP/2 (`h2`): requests are framed once, every
//! response is decoded and checked.

use bytes::Bytes;
use h2::client::SendRequest;
use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// Flow-control windows large enough that small responses never wait for a WINDOW_UPDATE.
const STREAM_WINDOW_BYTES: u32 = 1 << 20;
const CONNECTION_WINDOW_BYTES: u32 = 1 << 24;

/// One load level.
pub struct Load {
    pub addr: SocketAddr,
    /// Requests outstanding at all times.
    pub in_flight: usize,
    pub connections: usize,
    /// Answers before this much time has passed are not counted.
    pub warmup: Duration,
    /// The window whose answers are counted.
    pub measure: Duration,
    pub tenants: usize,
}

/// What one load level measured: answers completed inside the window.
#[derive(Default)]
pub struct Tally {
    pub ok: u64,
    pub over_limit: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Answers of any kind, warm-up included: what the CPU time was spent on.
    pub answers_all: u64,
    latencies_ns: Vec<u64>,
    window: Duration,
}

impl Tally {
    /// Decisions (OK or OVER_LIMIT answers) per second of the window.
    pub fn per_second(&self) -> f64 {
        (self.ok + self.over_limit) as f64 / self.window.as_secs_f64()
    }

    /// The latency below which `num / den` of the decisions fall, nearest-rank.
    pub fn percentile_ns(&self, num: u64, den: u64) -> u64 {
        let n = self.latencies_ns.len() as u64;
        if n == 0 {
            return 0;
        }
        let rank = (n * num).div_ceil(den).clamp(1, n);
        self.latencies_ns[(rank - 1) as usize]
    }

    pub fn max_ns(&self) -> u64 {
        self.latencies_ns.last().copied().unwrap_or(0)
    }

    fn merge(&mut self, other: Tally) {
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.errors += other.errors;
        self.answers_all += other.answers_all;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latencies_ns.extend(other.latencies_ns);
    }
}

/// `RateLimitRequest`s, one per tenant, each already in a gRPC length-prefixed frame.
fn framed_requests(tenants: usize) -> Vec<Bytes> {
    (0..tenants)
        .map(|t| {
            let msg = RateLimitRequest {
                domain: "edge".into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "tenant".into(),
                        value: format!("t{t}"),
                    }],
                    limit: None,
                    hits_addend: None,
                }],
                hits_addend: 1,
            }
            .encode_to_vec();
            let mut frame = Vec::with_capacity(5 + msg.len());
            frame.push(0);
            frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            frame.extend_from_slice(&msg);
            Bytes::from(frame)
        })
        .collect()
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Bytes>, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .handshake(tcp)
        .await
        .map_err(|e| format!("HTTP/2 handshake with {addr}: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// Runs one load level to completion.
pub async fn run_load(load: &Load) -> Tally {
    let uri: http::Uri = format!("http://{}{PATH}", load.addr).parse().expect("uri");
    let requests = framed_requests(load.tenants);
    let mut conns = Vec::with_capacity(load.connections);
    for _ in 0..load.connections {
        conns.push(connect(load.addr).await.expect("connection"));
    }
    let start = Instant::now();
    let window = (start + load.warmup, start + load.warmup + load.measure);
    let tasks: Vec<_> = (0..load.in_flight)
        .map(|slot| {
            let send = conns[slot % conns.len()].clone();
            let uri = uri.clone();
            let requests = requests.clone();
            tokio::spawn(async move { slot_loop(slot, send, uri, requests, window).await })
        })
        .collect();
    let mut total = Tally {
        window: load.measure,
        ..Tally::default()
    };
    for t in tasks {
        total.merge(t.await.expect("load task"));
    }
    total.latencies_ns.sort_unstable();
    total
}

/// One outstanding request at a time, back to back, until the window closes.
async fn slot_loop(
    slot: usize,
    mut send: SendRequest<Bytes>,
    uri: http::Uri,
    requests: Vec<Bytes>,
    (from, until): (Instant, Instant),
) -> Tally {
    let mut tally = Tally::default();
    let mut buf = Vec::with_capacity(256);
    let mut i = slot;
    loop {
        let body = requests[i % requests.len()].clone();
        i += 1;
        let sent = Instant::now();
        let answer = call(&mut send, &uri, body, &mut buf).await;
        let done = Instant::now();
        tally.answers_all += 1;
        if done >= until {
            return tally;
        }
        if done < from {
            continue;
        }
        match answer {
            Ok(Code::Ok) => tally.ok += 1,
            Ok(_) => tally.over_limit += 1,
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert(e);
                continue;
            }
        }
        tally.latencies_ns.push((done - sent).as_nanos() as u64);
    }
}

/// Sends one framed request and returns the decoded overall code (OK or OVER_LIMIT).
async fn call(
    send: &mut SendRequest<Bytes>,
    uri: &http::Uri,
    body: Bytes,
    buf: &mut Vec<u8>,
) -> Result<Code, String> {
    let err = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    std::future::poll_fn(|cx| send.poll_ready(cx))
        .await
        .map_err(|e| err("stream slot", &e))?;
    let request = http::Request::post(uri.clone())
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(())
        .expect("request head");
    let (response, mut stream) = send
        .send_request(request, false)
        .map_err(|e| err("sending headers", &e))?;
    stream
        .send_data(body, true)
        .map_err(|e| err("sending body", &e))?;
    let response = response.await.map_err(|e| err("response", &e))?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("HTTP status {}", response.status()));
    }
    if let Some(status) = response.headers().get("grpc-status") {
        return Err(format!("trailers-only answer, grpc-status {status:?}"));
    }
    let mut recv = response.into_body();
    buf.clear();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(|e| err("response body", &e))?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
    }
    let trailers = recv
        .trailers()
        .await
        .map_err(|e| err("trailers", &e))?
        .ok_or("no trailers")?;
    match trailers.get("grpc-status").map(|v| v.as_bytes()) {
        Some(b"0") => {}
        other => return Err(format!("grpc-status {other:?}")),
    }
    decode(buf)
}

fn decode(frame: &[u8]) -> Result<Code, String> {
    let (head, msg) = frame
        .split_at_checked(5)
        .ok_or("response shorter than a gRPC frame header")?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if head[0] != 0 || len != msg.len() {
        return Err(format!(
            "gRPC frame: flag {}, length {len}, {} bytes",
            head[0],
            msg.len()
        ));
    }
    let answer = RateLimitResponse::decode(msg).map_err(|e| format!("decoding: {e}"))?;
    let code = Code::try_from(answer.overall_code).map_err(|_| "unknown overall code")?;
    if answer.statuses.len() != 1 || answer.statuses[0].code != answer.overall_code {
        return Err(format!(
            "{} statuses for one descriptor",
            answer.statuses.len()
        ));
    }
    match code {
        Code::Ok | Code::OverLimit => Ok(code),
        Code::Unknown => Err("overall code UNKNOWN".into()),
    }
}
