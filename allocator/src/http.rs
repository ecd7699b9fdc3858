//! The node's HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.
//!
//! `/healthz` answers 200 while the process serves requests at all; `/readyz` answers 200
//! only when the node can do its job (it knows a leader and has applied what was committed),
//! so a load balancer sends holders only to nodes that can answer them.

use crate::metrics::AllocatorMetrics;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use leasehold_proto::transport::{limited, serve_http1, ListenerLimits, HEADER_TIMEOUT_MS_DEFAULT};
use std::future::Future;
use std::sync::Arc;

/// Why a node is not ready, or `Ok` when it is.
pub type ReadinessCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

#[derive(Clone)]
struct Http {
    metrics: Arc<AllocatorMetrics>,
    ready: ReadinessCheck,
}

pub fn router(metrics: Arc<AllocatorMetrics>, ready: ReadinessCheck) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(Http { metrics, ready })
}

async fn render_metrics(State(h): State<Http>) -> impl IntoResponse {
    h.metrics.ready.set(i64::from((h.ready)().is_ok()));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.render(),
    )
}

async fn readyz(State(h): State<Http>) -> impl IntoResponse {
    match (h.ready)() {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

/// Serves the endpoint on `listener` until `shutdown` completes, with the gRPC listener's
/// connection bounds and a deadline on request headers.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_http1(
        limited(listener, limits),
        router,
        HEADER_TIMEOUT_MS_DEFAULT,
        shutdown,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn health_readiness_and_metrics() {
        let metrics = Arc::new(AllocatorMetrics::new(
            Arc::new(BTreeMap::new),
            crate::rpc_timer::RpcTimer::default(),
        ));
        let ready_flag = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ready_flag);
        let ready: ReadinessCheck = Arc::new(move || {
            if flag.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("no leader known".into())
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let limits = ListenerLimits::default();
        let server = tokio::spawn(serve(listener, router(metrics, ready), limits, async {
            let _ = rx.await;
        }));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let r = get(addr, "/readyz").await;
        assert!(
            r.starts_with("HTTP/1.1 503") && r.contains("no leader known"),
            "{r}"
        );
        let m = get(addr, "/metrics").await;
        assert!(m.contains("\nleasehold_ready 0\n"), "{m}");
        ready_flag.store(true, Ordering::SeqCst);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        let m = get(addr, "/metrics").await;
        assert!(m.contains("leasehold_raft_is_leader"), "{m}");
        assert!(m.contains("\nleasehold_ready 1\n"), "{m}");
        tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
