//! Accepting mutual-TLS connections for the HTTP API.
//!
//! Handshakes run beside the accept loop, at most [`TLS_HANDSHAKES_MAX`] at once and each
//! for at most [`TLS_HANDSHAKE_TIMEOUT_MS`], so a client that connects and stalls delays
//! nobody else; connections beyond that many wait in the kernel's backlog. A failed
//! handshake (no client certificate, one from another CA, a timeout) drops that connection
//! and is logged at debug level.

use leasehold_proto::transport::TLS_HANDSHAKE_TIMEOUT_MS;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Handshakes in progress at once on one listener.
pub const TLS_HANDSHAKES_MAX: usize = 256;

/// Pause after an accept error (out of file descriptors, for instance), in milliseconds.
const ACCEPT_RETRY_MS: u64 = 50;

type Handshake = std::io::Result<(TlsStream<TcpStream>, SocketAddr)>;

/// A TCP listener whose connections come out TLS-established.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Handshake>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<tokio_rustls::rustls::ServerConfig>) -> Self {
        TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshakes: JoinSet::new(),
        }
    }

    fn start_handshake(&mut self, stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let acceptor = self.acceptor.clone();
        self.handshakes.spawn(async move {
            let limit = Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS);
            match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => Ok((tls, peer)),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let room = self.handshakes.len() < TLS_HANDSHAKES_MAX;
            tokio::select! {
                accepted = self.tcp.accept(), if room => match accepted {
                    Ok((stream, peer)) => self.start_handshake(stream, peer),
                    Err(error) => {
                        tracing::warn!(%error, "HTTP accept failed");
                        tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                    }
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    match done {
                        Ok(Ok(established)) => return established,
                        Ok(Err(error)) => tracing::debug!(%error, "HTTP TLS handshake failed"),
                        Err(error) => tracing::warn!(%error, "HTTP TLS handshake task failed"),
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
