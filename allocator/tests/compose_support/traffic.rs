//! Requests through the gateways from this host: one thread per gateway and tenant, each
//! answer recorded with when it was sent and received, and the admitted ones checked against
//! the fixed-window bound.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A request waits at most this long for its answer; the gateways answer in milliseconds.
const REQUEST_TIMEOUT_MS: u64 = 2_000;

/// One answer from a gateway (`status` 0: no answer).
#[derive(Clone, Debug)]
pub struct Sample {
    pub gateway: usize,
    pub tenant: &'static str,
    pub sent: Instant,
    pub received: Instant,
    pub status: u16,
}

/// Status and headers of `GET /` on `addr` with `x-tenant: tenant`.
pub fn get(addr: SocketAddr, tenant: &str) -> Result<(u16, Vec<(String, String)>), String> {
    let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let req =
        format!("GET / HTTP/1.1\r\nHost: gw\r\nx-tenant: {tenant}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {head:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers))
}

/// Requests flowing until stopped.
pub struct Traffic {
    pub samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Traffic {
    /// Every `every`, a request per gateway in `gateways` and tenant in `tenants`.
    pub fn start(gateways: &[SocketAddr], tenants: &[&'static str], every: Duration) -> Traffic {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (gateway, &addr) in gateways.iter().enumerate() {
            for &tenant in tenants {
                let (samples, stop) = (Arc::clone(&samples), Arc::clone(&stop));
                threads.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let sent = Instant::now();
                        let status = get(addr, tenant).map(|(s, _)| s).unwrap_or(0);
                        let received = Instant::now();
                        samples.lock().unwrap().push(Sample {
                            gateway,
                            tenant,
                            sent,
                            received,
                            status,
                        });
                        std::thread::sleep(every.saturating_sub(received - sent));
                    }
                }));
            }
        }
        Traffic {
            samples,
            stop,
            threads,
        }
    }

    pub fn snapshot(&self) -> Vec<Sample> {
        self.samples.lock().unwrap().clone()
    }

    /// How long after `after` the first request of `tenant` sent after it was admitted by
    /// any of `gateways`, if one was.
    pub fn first_admitted(
        &self,
        gateways: &[usize],
        tenant: &str,
        after: Instant,
    ) -> Option<Duration> {
        self.snapshot()
            .into_iter()
            .filter(|s| gateways.contains(&s.gateway) && s.tenant == tenant)
            .filter(|s| s.sent > after && s.status == 200)
            .map(|s| s.received - after)
            .min()
    }

    /// Waits until `gateway` admitted a request of `tenant` sent after `after`.
    pub fn wait_admitted(
        &self,
        gateway: usize,
        tenant: &str,
        after: Instant,
        within: Duration,
    ) -> Result<Duration, String> {
        let deadline = Instant::now() + within;
        loop {
            let first = self.snapshot().into_iter().find(|s| {
                s.gateway == gateway && s.tenant == tenant && s.sent > after && s.status == 200
            });
            if let Some(s) = first {
                return Ok(s.received - after);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "gateway {gateway} admitted no {tenant} request within {within:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        Arc::try_unwrap(self.samples).unwrap().into_inner().unwrap()
    }
}

/// Intervals between two admissions of `tenant` (over all gateways) holding more than the
/// fixed-window bound allows: `limit` per window of `window` means at most
/// `limit · (⌈X / window⌉ + 1)` in any span `X`. Each admission was decided somewhere between
/// its sending and its answer, so a span is widened by the slowest admitted answer.
pub fn window_violations(
    samples: &[Sample],
    tenant: &str,
    limit: u64,
    window: Duration,
) -> Vec<String> {
    let admitted: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.tenant == tenant && s.status == 200)
        .collect();
    let slack = admitted
        .iter()
        .map(|s| s.received - s.sent)
        .max()
        .unwrap_or_default();
    let mut times: Vec<Instant> = admitted.iter().map(|s| s.received).collect();
    times.sort();
    let mut out = Vec::new();
    for i in 0..times.len() {
        for j in i..times.len() {
            let span = times[j] - times[i] + slack;
            let windows = span.as_nanos().div_ceil(window.as_nanos()) as u64;
            let bound = limit * (windows + 1);
            let count = (j - i + 1) as u64;
            if count > bound {
                out.push(format!(
                    "{count} admitted of {tenant} within {span:?} (bound {bound})"
                ));
                break;
            }
        }
    }
    out
}

/// The longest time `gateway` (any gateway if `None`) went without admitting `tenant` within
/// `from..to`, counting the stretches from `from` to the first admission and from the last
/// one to `to`.
pub fn longest_gap(
    samples: &[Sample],
    gateway: Option<usize>,
    tenant: &str,
    from: Instant,
    to: Instant,
) -> Duration {
    let mut times: Vec<Instant> = samples
        .iter()
        .filter(|s| gateway.is_none_or(|g| g == s.gateway))
        .filter(|s| s.tenant == tenant && s.status == 200)
        .map(|s| s.received)
        .filter(|t| (from..to).contains(t))
        .collect();
    times.sort();
    let mut edges = vec![from];
    edges.extend(times);
    edges.push(to);
    edges
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}
