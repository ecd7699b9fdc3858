//! gRPC over turmoil's simulated TCP: a connector for [`ChannelFactory`] clients and an
//! incoming-connection stream for tonic servers. Everything above the socket (HTTP/2,
//! tonic, the services, the grantor client) is the production code.
//!
//! [`ChannelFactory`]: leasehold_proto::transport::ChannelFactory

use super::sockets::OpenSocket;
use hyper_util::rt::TokioIo;
use leasehold_proto::transport::{ChannelError, ChannelFactory, ChannelSettings, ClientTransport};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Uri};

/// Most accepted connections waiting for the server to take them.
pub const ACCEPT_BACKLOG_MAX: usize = 64;
/// How long a simulated client's HTTP/2 connection remembers a stream it reset, in seconds
/// of real time: longer than any run, so that h2 forgets such streams only by count.
pub const RESET_STREAM_KEPT_S: u64 = 24 * 3_600;

/// Opens turmoil TCP streams to the host and port of a URI.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimConnector;

type ConnectFuture = Pin<Box<dyn Future<Output = io::Result<TokioIo<SimStream>>> + Send>>;

impl tower_service::Service<Uri> for SimConnector {
    type Response = TokioIo<SimStream>;
    type Error = io::Error;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let invalid = |why: &str| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("uri `{uri}`: {why}"))
            };
            let host = uri.host().ok_or_else(|| invalid("no host"))?.to_owned();
            let port = uri.port_u16().ok_or_else(|| invalid("no port"))?;
            let stream = turmoil::net::TcpStream::connect((host, port)).await?;
            Ok(TokioIo::new(SimStream(OpenSocket::register(stream)?)))
        })
    }
}

/// Client channels of a simulated host: the production factory on simulated TCP, insecure
/// mode, with timeouts short next to a run's 10 s.
pub fn sim_channels() -> Result<ChannelFactory, ChannelError> {
    let settings = ChannelSettings {
        connect_timeout_ms: 500,
        request_timeout_ms: 1_000,
        ..ChannelSettings::default()
    };
    Ok(ChannelFactory::new(settings, ClientTransport::Plaintext)?.with_connector(connect_sim))
}

/// The [`leasehold_proto::transport::ChannelFactory::with_connector`] hook for turmoil.
///
/// h2 remembers a stream its side reset (a call that timed out) for a while, ignoring what
/// the peer still sends on it, and answers frames for a forgotten stream with a reset of its
/// own. It times that memory with the machine's real clock (one second by default), so
/// whether a late answer draws a reset, one more message with one more drawn delay, would
/// depend on how fast the machine runs the simulation. The simulated clients keep reset
/// streams for longer than any run instead; h2 still forgets them by count (50 per
/// connection).
pub fn connect_sim(endpoint: &Endpoint) -> Channel {
    endpoint
        .clone()
        .http2_reset_stream_duration(Duration::from_secs(RESET_STREAM_KEPT_S))
        .connect_with_connector_lazy(SimConnector)
}

/// A turmoil TCP stream as tonic's server and hyper's client take it, registered with its
/// host so that a crash closes it in order (see [`super::sockets`]).
#[derive(Debug)]
pub struct SimStream(OpenSocket);

impl Connected for SimStream {
    // No peer certificates or socket addresses: the simulation serves insecure mode.
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for SimStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0.poll_with(|s| Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_with(|s| Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.poll_with(|s| Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.poll_with(|s| Pin::new(s).poll_shutdown(cx))
    }
}

/// Accepts connections on `port` of the current simulated host, for tonic's
/// `serve_with_incoming`. The accept loop runs as a local task of the host, so it dies
/// with the host when it crashes.
pub async fn incoming(port: u16) -> io::Result<ReceiverStream<io::Result<SimStream>>> {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(ACCEPT_BACKLOG_MAX);
    tokio::task::spawn_local(async move {
        loop {
            let accepted = listener
                .accept()
                .await
                .and_then(|(s, _)| OpenSocket::register(s).map(SimStream));
            if tx.send(accepted).await.is_err() {
                return;
            }
        }
    });
    Ok(ReceiverStream::new(rx))
}
