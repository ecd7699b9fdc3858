//! The TLS handshakes one listener has under way, and which to give up when a newer
//! connection needs the room.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::server::Acceptor;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::{AbortHandle, Id, JoinError, JoinSet};
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;
use tonic::transport::server::Connected;

use super::{COMPLETED, EVICTED, FAILED, IN_PROGRESS, TLS_HANDSHAKE_TIMEOUT_MS};
use crate::transport::PeerOf;

/// Where a connection comes from, as far as sharing handshakes goes: an IPv4 address, or
/// an IPv6 /64 (one host is usually given a whole /64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Origin {
    V4([u8; 4]),
    V6([u8; 8]),
    Unknown,
}

impl Origin {
    fn of(ip: Option<IpAddr>) -> Origin {
        match ip {
            Some(IpAddr::V4(v4)) => Origin::V4(v4.octets()),
            Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => Origin::V4(v4.octets()),
                None => {
                    let mut prefix = [0u8; 8];
                    prefix.copy_from_slice(&v6.octets()[..8]);
                    Origin::V6(prefix)
                }
            },
            None => Origin::Unknown,
        }
    }
}

/// One handshake under way.
struct Pending {
    task: AbortHandle,
    /// Set once the client's ClientHello has been read.
    hello: Arc<AtomicBool>,
    origin: Origin,
}

/// The handshakes under way, oldest first.
pub(super) struct Handshakes<IO> {
    pub(super) tasks: JoinSet<io::Result<TlsStream<IO>>>,
    oldest_first: VecDeque<Pending>,
    per_origin: HashMap<Origin, usize>,
}

impl<IO> Default for Handshakes<IO> {
    fn default() -> Self {
        Handshakes {
            tasks: JoinSet::new(),
            oldest_first: VecDeque::new(),
            per_origin: HashMap::new(),
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
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: PeerOf,
{
    /// Starts the handshake of `io`, first giving up one under way if `io`'s origin has
    /// `handshakes_max / 4` under way (one of its own) or all have `handshakes_max` (any).
    pub(super) fn start(&mut self, config: Arc<ServerConfig>, io: IO, handshakes_max: usize) {
        let origin = Origin::of(io.connect_info().peer().ip);
        let origin_max = (handshakes_max / 4).max(1);
        let of_origin = self.per_origin.get(&origin).copied().unwrap_or(0);
        if origin != Origin::Unknown && of_origin >= origin_max {
            self.evict(|p| p.origin == origin);
        } else if self.oldest_first.len() >= handshakes_max {
            self.evict(|_| true);
        }
        let hello = Arc::new(AtomicBool::new(false));
        let task = self.tasks.spawn(handshake(config, io, Arc::clone(&hello)));
        self.oldest_first.push_back(Pending {
            task,
            hello,
            origin,
        });
        *self.per_origin.entry(origin).or_default() += 1;
        IN_PROGRESS.fetch_add(1, Ordering::Relaxed);
    }

    /// Gives up the oldest handshake `among` that has not had its ClientHello, else the
    /// oldest `among`.
    fn evict(&mut self, among: impl Fn(&Pending) -> bool) {
        let silent = self
            .oldest_first
            .iter()
            .position(|p| among(p) && !p.hello.load(Ordering::Relaxed));
        let victim = silent.or_else(|| self.oldest_first.iter().position(&among));
        if let Some(p) = victim.and_then(|at| self.remove(at)) {
            p.task.abort();
            EVICTED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn remove(&mut self, at: usize) -> Option<Pending> {
        let p = self.oldest_first.remove(at)?;
        if let Some(n) = self.per_origin.get_mut(&p.origin) {
            *n -= 1;
            if *n == 0 {
                self.per_origin.remove(&p.origin);
            }
        }
        IN_PROGRESS.fetch_sub(1, Ordering::Relaxed);
        Some(p)
    }

    /// The established connection of a finished handshake task, if it succeeded.
    pub(super) fn finished(
        &mut self,
        done: Result<(Id, io::Result<TlsStream<IO>>), JoinError>,
    ) -> Option<TlsStream<IO>> {
        let id = match &done {
            Ok((id, _)) => *id,
            // An evicted task, already counted when it was aborted.
            Err(e) if e.is_cancelled() => return None,
            Err(e) => e.id(),
        };
        if let Some(at) = self.oldest_first.iter().position(|p| p.task.id() == id) {
            self.remove(at);
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
mod tests {
    use super::*;

    #[test]
    fn ipv6_hosts_share_their_64_and_mapped_ipv4_is_ipv4() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            Origin::of(ip("2001:db8::1")),
            Origin::of(ip("2001:db8::ffff:2"))
        );
        assert_ne!(
            Origin::of(ip("2001:db8::1")),
            Origin::of(ip("2001:db8:0:1::1"))
        );
        assert_eq!(
            Origin::of(ip("::ffff:10.0.0.1")),
            Origin::of(ip("10.0.0.1"))
        );
        assert_ne!(Origin::of(ip("10.0.0.1")), Origin::of(ip("10.0.0.2")));
        assert_eq!(Origin::of(None), Origin::Unknown);
    }
}
