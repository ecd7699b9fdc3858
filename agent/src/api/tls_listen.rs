//! Establishing mutual TLS on the HTTP API's connections.
//!
//! Handshakes run beside the accept loop, at most [`TLS_HANDSHAKES_MAX`] at once and each
//! for at most [`TLS_HANDSHAKE_TIMEOUT_MS`], so a client that connects and stalls delays
//! nobody else; connections beyond that many wait until a handshake ends. A failed
//! handshake (no client certificate, one from another CA, a timeout) drops that connection
//! and is logged at debug level.

use leasehold_proto::transport::TLS_HANDSHAKE_TIMEOUT_MS;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

/// Handshakes in progress at once on one listener.
pub const TLS_HANDSHAKES_MAX: usize = 256;

/// The connections of `incoming` once each has completed a TLS handshake under `config`.
/// Handshaking stops when the returned stream is dropped.
pub fn tls_established<S, IO>(
    incoming: S,
    config: Arc<tokio_rustls::rustls::ServerConfig>,
) -> ReceiverStream<io::Result<TlsStream<IO>>>
where
    S: Stream<Item = io::Result<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(1);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        let mut incoming = std::pin::pin!(incoming);
        let mut handshakes: JoinSet<io::Result<TlsStream<IO>>> = JoinSet::new();
        let mut open = true;
        while open || !handshakes.is_empty() {
            let room = open && handshakes.len() < TLS_HANDSHAKES_MAX;
            tokio::select! {
                () = tx.closed() => return,
                next = incoming.next(), if room => match next {
                    Some(Ok(io)) => {
                        handshakes.spawn(handshake(acceptor.clone(), io));
                    }
                    Some(Err(error)) => tracing::debug!(%error, "HTTP connection not accepted"),
                    None => open = false,
                },
                Some(done) = handshakes.join_next(), if !handshakes.is_empty() => match done {
                    Ok(Ok(tls)) => {
                        if tx.send(Ok(tls)).await.is_err() {
                            return;
                        }
                    }
                    Ok(Err(error)) => tracing::debug!(%error, "HTTP TLS handshake failed"),
                    Err(error) => tracing::warn!(%error, "HTTP TLS handshake task failed"),
                },
            }
        }
    });
    ReceiverStream::new(rx)
}

async fn handshake<IO>(acceptor: TlsAcceptor, io: IO) -> io::Result<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let limit = Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS);
    match tokio::time::timeout(limit, acceptor.accept(io)).await {
        Ok(done) => done,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}
