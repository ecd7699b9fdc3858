//! Establishing mutual TLS on a listener's connections, so that clients which never finish
//! a handshake cannot keep authenticated ones out.
//!
//! Handshakes run beside the accept loop, each for at most [`TLS_HANDSHAKE_TIMEOUT_MS`].
//! At most `handshakes_max` run at once; a connection arriving when that many are under
//! way evicts one of them instead of waiting: the oldest that has not yet sent its
//! ClientHello, else the oldest. One address (an IPv4 address, an IPv6 /64) may have at
//! most a quarter of those handshakes under way; past that its own oldest is evicted, so a
//! client flooding from one address churns only its own share. A silent client therefore holds at most `handshakes_max`
//! of the listener's connection slots, and only until newer connections arrive, and an
//! honest client, which sends its ClientHello at once, is evicted only when every slot
//! holds a client that has sent one too. tonic's own TLS starts every handshake the
//! listener yields, so silent clients could take every slot for the whole timeout.
//!
//! A failed handshake (no client certificate, one from another CA, a timeout, an eviction)
//! drops that connection and is counted in [`handshake_stats`]. So does an established
//! connection whose certificate already has `connections_per_peer_max` open: holding a
//! certificate of the CA must not let one client take every slot either.

use std::error::Error;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use super::{ListenerLimits, PeerOf, TLS_HANDSHAKE_TIMEOUT_MS};
use tonic::transport::server::Connected;

mod handshakes;
mod per_peer;
use handshakes::Handshakes;
pub use per_peer::PeerCounted;
use per_peer::PeerCounts;

/// Most handshakes under way at once on one listener.
pub const TLS_HANDSHAKES_MAX: usize = 256;

/// The handshakes a listener with `connections_max` slots runs at once: a quarter of its
/// slots, at most [`TLS_HANDSHAKES_MAX`], so unauthenticated clients never hold the rest.
pub fn handshakes_max_for(connections_max: usize) -> usize {
    (connections_max / 4).clamp(1, TLS_HANDSHAKES_MAX)
}

/// What became of the TLS handshakes of every listener in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandshakeStats {
    /// Handshakes under way now.
    pub in_progress: u64,
    /// Handshakes that completed: the client presented a certificate of our CA.
    pub completed: u64,
    /// Handshakes that failed: a bad or missing certificate, a protocol error, a timeout.
    pub failed: u64,
    /// Handshakes abandoned to make room for a newer connection.
    pub evicted: u64,
    /// Connections closed after their handshake because their certificate already had
    /// `connections_per_peer_max` open.
    pub over_peer_limit: u64,
}

static IN_PROGRESS: AtomicU64 = AtomicU64::new(0);
static COMPLETED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static EVICTED: AtomicU64 = AtomicU64::new(0);
static OVER_PEER_LIMIT: AtomicU64 = AtomicU64::new(0);

/// The counts so far, across every listener of the process.
pub fn handshake_stats() -> HandshakeStats {
    HandshakeStats {
        in_progress: IN_PROGRESS.load(Ordering::Relaxed),
        completed: COMPLETED.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        evicted: EVICTED.load(Ordering::Relaxed),
        over_peer_limit: OVER_PEER_LIMIT.load(Ordering::Relaxed),
    }
}

/// The connections of `incoming` once each has completed a TLS handshake under `config`,
/// at most [`handshakes_max_for`]`(limits.connections_max)` at once and at most
/// `limits.connections_per_peer_max` open per client certificate (see the module's
/// description). Handshaking stops when the returned stream is dropped.
pub fn tls_established<S, IO, IE>(
    incoming: S,
    config: Arc<ServerConfig>,
    limits: ListenerLimits,
) -> ReceiverStream<io::Result<PeerCounted<TlsStream<IO>>>>
where
    S: Stream<Item = Result<IO, IE>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: PeerOf,
    IE: Into<Box<dyn Error + Send + Sync>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(1);
    let handshakes_max = handshakes_max_for(limits.connections_max);
    let per_peer_max = limits.connections_per_peer_max;
    let counts = Arc::new(PeerCounts::default());
    tokio::spawn(async move {
        let mut incoming = std::pin::pin!(incoming);
        let mut handshakes = Handshakes::default();
        let mut open = true;
        while open || !handshakes.tasks.is_empty() {
            tokio::select! {
                () = tx.closed() => return,
                next = incoming.next(), if open => match next {
                    Some(Ok(io)) => handshakes.start(Arc::clone(&config), io, handshakes_max),
                    Some(Err(error)) => {
                        let error = error.into();
                        tracing::debug!(%error, "connection not accepted");
                    }
                    None => open = false,
                },
                Some(done) = handshakes.tasks.join_next_with_id(), if !handshakes.tasks.is_empty() => {
                    let Some(tls) = handshakes.finished(done) else { continue };
                    let Some(counted) = count_peer(tls, &counts, per_peer_max) else { continue };
                    if tx.send(Ok(counted)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// `tls` holding a place in its certificate's count, or None (the connection dropped)
/// when that certificate already has `max` connections open.
fn count_peer<IO>(
    tls: TlsStream<IO>,
    counts: &Arc<PeerCounts>,
    max: Option<usize>,
) -> Option<PeerCounted<TlsStream<IO>>> {
    let (Some(max), Some(cert)) = (
        max,
        tls.get_ref().1.peer_certificates().and_then(|c| c.first()),
    ) else {
        return Some(PeerCounted::new(tls, None));
    };
    match counts.admit(cert.as_ref(), max) {
        Some(slot) => Some(PeerCounted::new(tls, Some(slot))),
        None => {
            OVER_PEER_LIMIT.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                max,
                "connection closed: its certificate has connections_per_peer_max open"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests;
