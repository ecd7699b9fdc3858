//! Establishing mutual TLS on a listener's connections, so that clients which never finish
//! a handshake cannot keep authenticated ones out.
//!
//! Handshakes run beside the accept loop, each for at most [`TLS_HANDSHAKE_TIMEOUT_MS`].
//! At most `handshakes_max` run at once; a connection arriving when that many are under
//! way evicts one of them instead of waiting: the oldest that has not yet sent its
//! ClientHello, else the oldest. A silent client therefore holds at most `handshakes_max`
//! of the listener's connection slots, and only until newer connections arrive, and an
//! honest client, which sends its ClientHello at once, is evicted only when every slot
//! holds a client that has sent one too. tonic's own TLS starts every handshake the
//! listener yields, so silent clients could take every slot for the whole timeout.
//!
//! A failed handshake (no client certificate, one from another CA, a timeout, an eviction)
//! drops that connection and is counted in [`handshake_stats`].

use std::collections::VecDeque;
use std::error::Error;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::server::Acceptor;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use super::TLS_HANDSHAKE_TIMEOUT_MS;

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
}

static IN_PROGRESS: AtomicU64 = AtomicU64::new(0);
static COMPLETED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static EVICTED: AtomicU64 = AtomicU64::new(0);

/// The counts so far, across every listener of the process.
pub fn handshake_stats() -> HandshakeStats {
    HandshakeStats {
        in_progress: IN_PROGRESS.load(Ordering::Relaxed),
        completed: COMPLETED.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        evicted: EVICTED.load(Ordering::Relaxed),
    }
}

/// The connections of `incoming` once each has completed a TLS handshake under `config`,
/// at most `handshakes_max` at once (see the module's description). Handshaking stops
/// when the returned stream is dropped.
pub fn tls_established<S, IO, IE>(
    incoming: S,
    config: Arc<ServerConfig>,
    handshakes_max: usize,
) -> ReceiverStream<io::Result<TlsStream<IO>>>
where
    S: Stream<Item = Result<IO, IE>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    IE: Into<Box<dyn Error + Send + Sync>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(1);
    let handshakes_max = handshakes_max.max(1);
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
                    if let Some(tls) = handshakes.finished(done) {
                        if tx.send(Ok(tls)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// The handshakes under way, oldest first, each with whether its ClientHello has come.
struct Handshakes<IO> {
    tasks: JoinSet<io::Result<TlsStream<IO>>>,
    oldest_first: VecDeque<(AbortHandle, Arc<AtomicBool>)>,
}

impl<IO> Default for Handshakes<IO> {
    fn default() -> Self {
        Handshakes {
            tasks: JoinSet::new(),
            oldest_first: VecDeque::new(),
        }
    }
}

impl<IO> Drop for Handshakes<IO> {
    fn drop(&mut self) {
        let open = self.oldest_first.len() as u64;
        IN_PROGRESS.fetch_sub(open, Ordering::Relaxed);
    }
}

impl<IO> Handshakes<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn start(&mut self, config: Arc<ServerConfig>, io: IO, handshakes_max: usize) {
        if self.oldest_first.len() >= handshakes_max {
            let silent = self
                .oldest_first
                .iter()
                .position(|(_, hello)| !hello.load(Ordering::Relaxed));
            if let Some((task, _)) = self.oldest_first.remove(silent.unwrap_or(0)) {
                task.abort();
                IN_PROGRESS.fetch_sub(1, Ordering::Relaxed);
                EVICTED.fetch_add(1, Ordering::Relaxed);
            }
        }
        let hello = Arc::new(AtomicBool::new(false));
        let task = self.tasks.spawn(handshake(config, io, Arc::clone(&hello)));
        self.oldest_first.push_back((task, hello));
        IN_PROGRESS.fetch_add(1, Ordering::Relaxed);
    }

    /// The established connection of a finished handshake task, if it succeeded.
    fn finished(
        &mut self,
        done: Result<(tokio::task::Id, io::Result<TlsStream<IO>>), tokio::task::JoinError>,
    ) -> Option<TlsStream<IO>> {
        let id = match &done {
            Ok((id, _)) => *id,
            // An evicted task, already counted when it was aborted.
            Err(e) if e.is_cancelled() => return None,
            Err(e) => e.id(),
        };
        if let Some(at) = self.oldest_first.iter().position(|(t, _)| t.id() == id) {
            self.oldest_first.remove(at);
            IN_PROGRESS.fetch_sub(1, Ordering::Relaxed);
        }
        match done {
            Ok((_, Ok(tls))) => {
                COMPLETED.fetch_add(1, Ordering::Relaxed);
                Some(tls)
            }
            Ok((_, Err(error))) => {
                FAILED.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%error, "TLS handshake failed");
                None
            }
            Err(error) => {
                FAILED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "TLS handshake task failed");
                None
            }
        }
    }
}

/// The server side of one handshake, `hello` set once the client's ClientHello is read.
async fn handshake<IO>(
    config: Arc<ServerConfig>,
    io: IO,
    hello: Arc<AtomicBool>,
) -> io::Result<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let limit = Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS);
    let both = async {
        let started = LazyConfigAcceptor::new(Acceptor::default(), io).await?;
        hello.store(true, Ordering::Relaxed);
        started.into_stream(config).await
    };
    match tokio::time::timeout(limit, both).await {
        Ok(done) => done,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests;
