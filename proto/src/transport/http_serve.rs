//! Serving an HTTP/1.1 router with a deadline on request headers.
//!
//! `axum::serve` gives no header timeout, so a client that trickles a header byte every few
//! seconds keeps its connection (and a file descriptor) forever. Here every connection
//! must deliver a request's headers within `header_timeout_ms` of starting to wait for
//! them; together with [`limited`](super::limited)'s connection cap and idle timeout,
//! slow clients cost a bounded number of sockets for a bounded time.

use std::future::Future;
use std::io;
use std::time::Duration;

use super::peer::PeerOf;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

/// Default deadline for a request's headers, in milliseconds.
pub const HEADER_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// Serves `router` on the connections `incoming` yields (plain or TLS-established) until
/// `shutdown` completes or `incoming` ends; then stops accepting, lets each connection
/// finish the request it is serving, and returns once all have closed. Every request
/// carries its connection's [`Peer`](super::Peer) as an extension.
pub async fn serve_http1<S, IO>(
    incoming: S,
    router: axum::Router,
    header_timeout_ms: u64,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()>
where
    S: Stream<Item = io::Result<IO>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: PeerOf,
{
    let mut incoming = std::pin::pin!(incoming);
    let mut shutdown = std::pin::pin!(shutdown);
    let (closing, close) = watch::channel(false);
    let header_timeout = Duration::from_millis(header_timeout_ms.max(1));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            next = incoming.next() => match next {
                None => break,
                Some(Err(error)) => tracing::debug!(%error, "HTTP connection not established"),
                Some(Ok(io)) => {
                    let serve = serve_one(io, router.clone(), header_timeout, close.clone());
                    connections.spawn(serve);
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn serve_one<IO>(
    io: IO,
    router: axum::Router,
    header_timeout: Duration,
    mut close: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: PeerOf,
{
    let peer = io.connect_info().peer();
    // Per connection, so that every request on it names the same caller.
    let service = TowerToHyperService::new(router.layer(axum::Extension(peer)));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let closing = async move {
        let _ = close.wait_for(|c| *c).await;
    };
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = closing => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "HTTP connection ended with an error");
    }
}

#[cfg(test)]
mod tests;
