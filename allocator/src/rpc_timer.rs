//! `leasehold_rpc_duration_seconds`: each gRPC call's handling time by method, taken by a
//! wrapper around a whole service, so every handler is timed alike without timing code of
//! its own.
//!
//! The method is the last segment of the request's path, which a client chooses (a path
//! the service does not implement is still answered, `UNIMPLEMENTED`), so the label's
//! values are capped at [`METHODS_MAX`]; calls of further methods are counted as `other`.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tonic::codegen::http;

/// Distinct method labels kept; every method of the lease, admin and Raft services fits.
pub const METHODS_MAX: usize = 64;
/// Longest method name kept as a label, in bytes.
const METHOD_LEN_MAX: usize = 64;

/// The histogram family and the method names it has seen.
#[derive(Clone)]
pub struct RpcTimer {
    family: Family<Vec<(String, String)>, Histogram>,
    seen: Arc<Mutex<HashSet<String>>>,
}

impl Default for RpcTimer {
    fn default() -> Self {
        RpcTimer {
            // 50 µs to about 1.6 s.
            family: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
            }),
            seen: Arc::default(),
        }
    }
}

impl std::fmt::Debug for RpcTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RpcTimer")
    }
}

impl RpcTimer {
    /// The family to register.
    pub fn family(&self) -> Family<Vec<(String, String)>, Histogram> {
        self.family.clone()
    }

    /// Records one call of `method` that took `seconds`.
    pub fn observe(&self, method: &str, seconds: f64) {
        let label = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let known = seen.contains(method);
            if known || (seen.len() < METHODS_MAX && method.len() <= METHOD_LEN_MAX) {
                if !known {
                    seen.insert(method.to_string());
                }
                method
            } else {
                "other"
            }
        };
        self.family
            .get_or_create(&vec![("method".to_string(), label.to_string())])
            .observe(seconds);
    }

    /// `service` with each call timed.
    pub fn wrap<S>(&self, service: S) -> Timed<S> {
        Timed {
            inner: service,
            timer: self.clone(),
        }
    }
}

/// A gRPC service whose calls are timed from the request to the start of the response
/// (for a stream, its first message's headers).
#[derive(Clone)]
pub struct Timed<S> {
    inner: S,
    timer: RpcTimer,
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Timed<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower_service::Service<http::Request<B>> for Timed<S>
where
    S: tower_service::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        let timer = self.timer.clone();
        let started = Instant::now();
        let call = self.inner.call(req);
        Box::pin(async move {
            let out = call.await;
            timer.observe(&method, started.elapsed().as_secs_f64());
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(timer: &RpcTimer, method: &str) -> u64 {
        let mut out = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("t", "t", timer.family());
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        let prefix = format!("t_count{{method=\"{method}\"}} ");
        out.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map_or(0, |v| v.parse().unwrap())
    }

    #[test]
    fn methods_past_the_cap_are_counted_as_other() {
        let timer = RpcTimer::default();
        timer.observe("Acquire", 0.001);
        timer.observe("Acquire", 0.002);
        for i in 0..2 * METHODS_MAX {
            timer.observe(&format!("m{i}"), 0.001);
        }
        timer.observe(&"x".repeat(METHOD_LEN_MAX + 1), 0.001);
        assert_eq!(count(&timer, "Acquire"), 2);
        assert_eq!(count(&timer, "m0"), 1);
        // 63 more distinct names fit beside Acquire; the rest and the long name are other.
        assert_eq!(count(&timer, "other"), (METHODS_MAX + 2) as u64);
        // A name seen before the cap filled keeps its own series.
        timer.observe("Acquire", 0.001);
        assert_eq!(count(&timer, "Acquire"), 3);
    }
}
