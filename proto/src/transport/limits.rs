//! Bounds on a listener's connections: how many are open at once, and how long one may
//! stay silent.
//!
//! A server that accepts every connection runs out of file descriptors (and memory) to a
//! client that opens connections and never finishes them: each TLS handshake, HTTP header
//! or gRPC preface it leaves half-sent holds a socket. [`limited`] accepts a connection only
//! while fewer than `connections_max` are open (the rest wait in the kernel's backlog), and
//! every accepted connection is closed once nothing has been read from or written to it
//! for `idle_timeout_ms`. Protocol timeouts (TLS handshake, HTTP/1 headers) come on top.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

/// Default connections open at once on one listener.
pub const CONNECTIONS_MAX_DEFAULT: usize = 1_024;
/// Default silence after which a connection is closed, in milliseconds.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 300_000;
/// Largest `connections_max` a configuration may ask for.
pub const CONNECTIONS_MAX_LIMIT: usize = 1_000_000;
/// Pause after a failed accept (out of file descriptors, for instance), in milliseconds.
const ACCEPT_RETRY_MS: u64 = 50;

/// The bounds [`limited`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections open at once; further ones wait in the kernel's backlog.
    pub connections_max: usize,
    /// A connection with nothing read or written for this long is closed.
    pub idle_timeout_ms: u64,
    /// Connections one client certificate may have open at once on a TLS listener; more
    /// are closed once their handshake tells whose they are. None: only `connections_max`.
    pub connections_per_peer_max: Option<usize>,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            connections_max: CONNECTIONS_MAX_DEFAULT,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            connections_per_peer_max: None,
        }
    }
}

/// File descriptors a process keeps beside its listeners' connections: storage files,
/// connections it opens itself, standard streams.
pub const OPEN_FILES_HEADROOM: u64 = 256;

/// Raises this process's soft open-file limit to at least `needed` (up to the hard limit)
/// and returns the limit now in force; an error names both when the hard limit is lower.
/// A listener that may hold more connections than the process may open files would fail
/// every later accept, storage open and outgoing call once they are all taken.
#[cfg(unix)]
pub fn ensure_open_files(needed: u64) -> Result<u64, OpenFilesError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(OpenFilesError::Query(io::Error::last_os_error()));
    }
    let (soft, hard) = (lim.rlim_cur, lim.rlim_max);
    if soft >= needed {
        return Ok(soft);
    }
    if hard < needed {
        return Err(OpenFilesError::TooLow { needed, hard });
    }
    lim.rlim_cur = needed;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(OpenFilesError::Query(io::Error::last_os_error()));
    }
    Ok(needed)
}

/// The connections each of `listeners` listeners may hold: `configured` when given (the
/// open-file limit raised to fit it, or an error naming the hard limit), otherwise
/// `default` lowered as far as the hard limit requires (never below one), with a warning.
#[cfg(unix)]
pub fn fit_connections(
    configured: Option<usize>,
    default: usize,
    listeners: u64,
) -> Result<usize, OpenFilesError> {
    let needed = |per: usize| listeners.max(1) * per as u64 + OPEN_FILES_HEADROOM;
    if let Some(n) = configured {
        ensure_open_files(needed(n))?;
        return Ok(n);
    }
    let hard = open_files_hard_limit()?;
    let fits = hard.saturating_sub(OPEN_FILES_HEADROOM) / listeners.max(1);
    let per = default
        .min(usize::try_from(fits).unwrap_or(usize::MAX))
        .max(1);
    if per < default {
        tracing::warn!(
            connections_max = per,
            default,
            open_files_hard_limit = hard,
            "connections_max lowered to fit the open-file hard limit (ulimit -Hn); raise it \
             or set connections_max"
        );
    }
    ensure_open_files(needed(per).min(hard))?;
    Ok(per)
}

#[cfg(unix)]
fn open_files_hard_limit() -> Result<u64, OpenFilesError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(OpenFilesError::Query(io::Error::last_os_error()));
    }
    Ok(lim.rlim_max)
}

/// Why the open-file limit cannot fit the configured connections.
#[derive(Debug, thiserror::Error)]
pub enum OpenFilesError {
    #[error(
        "connections_max needs {needed} open files but the hard limit (ulimit -Hn) is {hard}: \
         lower connections_max or raise the limit"
    )]
    /// The hard limit is below what the listener's connections need.
    TooLow {
        /// Open files the configured connections and the headroom need.
        needed: u64,
        /// The process's hard limit.
        hard: u64,
    },
    #[error("cannot read or set the open-file limit: {0}")]
    /// The system refused to report or change the limit.
    Query(#[source] io::Error),
}

/// A listener whose connections [`limited`] can bound.
pub trait Accept: Send + 'static {
    /// One accepted connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next connection.
    fn accept(&self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Accept for TcpListener {
    type Io = TcpStream;
    async fn accept(&self) -> io::Result<TcpStream> {
        let (stream, _) = TcpListener::accept(self).await?;
        // Answers are a few small writes that must leave at once: with Nagle's algorithm a
        // later frame waits for the peer's delayed ACK.
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

#[cfg(unix)]
impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<tokio::net::UnixStream> {
        tokio::net::UnixListener::accept(self).await.map(|(s, _)| s)
    }
}

/// The connections of `listener`, at most `limits.connections_max` open at once, each
/// closed after `limits.idle_timeout_ms` of silence. Accepting stops when the stream is
/// dropped.
pub fn limited<L: Accept>(
    listener: L,
    limits: ListenerLimits,
) -> ReceiverStream<io::Result<Limited<L::Io>>> {
    let (tx, rx) = mpsc::channel(1);
    let slots = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    let idle = Duration::from_millis(limits.idle_timeout_ms.max(1));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                permit = Arc::clone(&slots).acquire_owned() => match permit {
                    Ok(permit) => listener.accept().await.map(|io| Limited::new(io, permit, idle)),
                    Err(_) => return,
                },
            };
            if let Err(error) = &accepted {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                continue;
            }
            if tx.send(accepted).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// A connection holding one of its listener's slots until dropped, and failing with
/// `TimedOut` once it has been silent for its idle timeout.
pub struct Limited<IO> {
    io: IO,
    _slot: OwnedSemaphorePermit,
    idle: Duration,
    /// Last read or write; the timer is moved to `active + idle` only when it fires, so
    /// traffic costs a clock read, not a timer update.
    active: Instant,
    timer: Pin<Box<Sleep>>,
}

impl<IO> Limited<IO> {
    fn new(io: IO, slot: OwnedSemaphorePermit, idle: Duration) -> Self {
        let now = Instant::now();
        Limited {
            io,
            _slot: slot,
            idle,
            active: now,
            timer: Box::pin(tokio::time::sleep_until(now + idle)),
        }
    }

    /// The connection underneath.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// `Ready(TimedOut)` once the connection has been silent for its idle timeout;
    /// otherwise arranges to be woken when it might have been.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let deadline = self.active + self.idle;
            if deadline <= Instant::now() {
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle for longer than idle_timeout_ms",
                ));
            }
            self.timer.as_mut().reset(deadline);
        }
    }

    /// Passes `progress` through, noting activity, or times out a pending call.
    fn observe<T>(
        &mut self,
        cx: &mut Context<'_>,
        progress: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match progress {
            Poll::Ready(r) => {
                self.active = Instant::now();
                Poll::Ready(r)
            }
            Poll::Pending => self.poll_idle(cx).map(Err),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Limited<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let progress = Pin::new(&mut this.io).poll_read(cx, buf);
        this.observe(cx, progress)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Limited<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let progress = Pin::new(&mut this.io).poll_write(cx, buf);
        this.observe(cx, progress)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let progress = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.observe(cx, progress)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let progress = Pin::new(&mut this.io).poll_flush(cx);
        this.observe(cx, progress)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for Limited<IO> {
    type ConnectInfo = IO::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests;
