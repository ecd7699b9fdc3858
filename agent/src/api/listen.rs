//! Listening addresses — TCP (`127.0.0.1:8081`) or a Unix socket (`unix:/run/agent.sock`) —
//! and serving gRPC (plaintext or mutual TLS) or HTTP on an already-bound listener until a
//! shutdown future completes.

use leasehold_proto::transport::{
    grpc_rustls_config, limited, rustls_server_config, serve_http1, tls_established,
    ListenerLimits, TlsConfigError, TlsPem, HEADER_TIMEOUT_MS_DEFAULT,
};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;
use tokio::net::{TcpListener, UnixListener};
use tokio_rustls::rustls::ServerConfig;
use tonic::transport::server::Router;
use tonic::transport::Server;

/// Longest listen address accepted, in bytes (a Unix socket path must fit in `sun_path`
/// anyway, which is far shorter).
pub const LISTEN_ADDR_LEN_MAX: usize = 255;

/// Concurrent calls one gRPC connection may have open. Envoy multiplexes every worker's
/// rate-limit calls over few connections, so this is generous; with
/// [`GRPC_MESSAGE_LEN_MAX`] it bounds the memory one connection can pin (16 MiB).
pub const GRPC_STREAMS_PER_CONNECTION_MAX: u32 = 256;
/// Largest request message accepted on the agent's gRPC services, in bytes; larger ones
/// are refused before they are buffered whole. A rate-limit or admission request with the
/// most descriptors and entries the agent accepts is a few KiB.
pub const GRPC_MESSAGE_LEN_MAX: usize = 64 * 1024;
/// HTTP/2 flow-control window of one gRPC call, in bytes. Rate-limit messages are tens of
/// bytes, so a fixed window this size never stalls a call and no window probing is needed.
pub const GRPC_STREAM_WINDOW_BYTES: u32 = 1 << 20;
/// HTTP/2 flow-control window of one gRPC connection, in bytes.
pub const GRPC_CONNECTION_WINDOW_BYTES: u32 = 8 << 20;

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP socket address; the host must be an IP address, so binding never resolves names.
    Tcp(SocketAddr),
    /// A Unix domain socket at this path.
    Unix(PathBuf),
}

/// Why a listen address could not be parsed or bound.
#[derive(Debug, Error)]
pub enum ListenError {
    /// Not `ip:port` or `unix:/path`.
    #[error("listen address `{addr}` is invalid: {reason}")]
    Parse {
        /// The offending text.
        addr: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// The operating system refused to bind.
    #[error("binding listen address `{addr}`: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl std::str::FromStr for ListenAddr {
    type Err = ListenError;

    fn from_str(s: &str) -> Result<Self, ListenError> {
        let fail = |reason| ListenError::Parse {
            addr: s.chars().take(LISTEN_ADDR_LEN_MAX).collect(),
            reason,
        };
        if s.len() > LISTEN_ADDR_LEN_MAX {
            return Err(fail("longer than 255 bytes"));
        }
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(fail("`unix:` needs a socket path"));
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        s.parse()
            .map(ListenAddr::Tcp)
            .map_err(|_| fail("expected ip:port (an IP address, not a name) or unix:/path"))
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl ListenAddr {
    /// Whether only this host can connect: a loopback IP or a Unix socket. Such listeners
    /// may serve plaintext by default, since the gateway beside the agent is the only peer.
    pub fn is_local(&self) -> bool {
        match self {
            ListenAddr::Tcp(a) => a.ip().is_loopback(),
            ListenAddr::Unix(_) => true,
        }
    }

    /// Binds the address. A Unix socket left by an earlier run is replaced, since binding
    /// over it would fail; any other kind of file at that path is an error.
    pub async fn bind(&self) -> Result<Listener, ListenError> {
        let err = |source| ListenError::Bind {
            addr: self.to_string(),
            source,
        };
        match self {
            ListenAddr::Tcp(a) => TcpListener::bind(a).await.map(Listener::Tcp).map_err(err),
            ListenAddr::Unix(path) => {
                remove_stale_socket(path).map_err(err)?;
                UnixListener::bind(path).map(Listener::Unix).map_err(err)
            }
        }
    }
}

fn remove_stale_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "a file that is not a socket is in the way",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    /// A TCP listener.
    Tcp(TcpListener),
    /// A Unix domain socket listener.
    Unix(UnixListener),
}

impl Listener {
    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> std::io::Result<ListenAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().map(ListenAddr::Tcp),
            Listener::Unix(l) => {
                let addr = l.local_addr()?;
                let path = addr.as_pathname().map(PathBuf::from).unwrap_or_default();
                Ok(ListenAddr::Unix(path))
            }
        }
    }
}

/// Default `connection_age_max_ms`: ten minutes.
pub const CONNECTION_AGE_MAX_MS_DEFAULT: u64 = 600_000;
/// How long calls in flight on a connection asked to go away may still take before it is
/// closed, in milliseconds: a request body's whole default deadline.
pub const CONNECTION_AGE_GRACE_MS: u64 = 10_000;

/// `server`, asking each connection to go away once it is `age_max_ms` old and closing it
/// `CONNECTION_AGE_GRACE_MS` later. Gateways reconnect on GOAWAY as on any server restart;
/// a client trickling bytes to hold a connection slot loses it then, since the idle
/// timeout only counts silence.
pub fn with_connection_age(server: Server, age_max_ms: u64) -> Server {
    server
        .max_connection_age(std::time::Duration::from_millis(age_max_ms))
        .max_connection_age_grace(std::time::Duration::from_millis(CONNECTION_AGE_GRACE_MS))
}

/// The gRPC server builder, with the agent's per-connection bounds. TLS is not tonic's: see
/// [`serve_grpc`].
pub fn grpc_server() -> Server {
    Server::builder()
        .max_concurrent_streams(GRPC_STREAMS_PER_CONNECTION_MAX)
        .initial_stream_window_size(GRPC_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(GRPC_CONNECTION_WINDOW_BYTES)
        // Adaptive windows ping to estimate bandwidth-delay; fixed windows above already
        // exceed anything a rate-limit call sends.
        .http2_adaptive_window(Some(false))
}

/// The gRPC listener's mutual TLS: every client must present a certificate that chains to
/// `tls.ca`; others fail the handshake. HTTP/2 only.
///
/// The agent accepts any certificate from its CA and does not ask for a Leasehold role:
/// its callers are gateways, whose certificates come from the operator's own CA.
pub fn grpc_tls_config(tls: &TlsPem) -> Result<Arc<ServerConfig>, TlsConfigError> {
    grpc_rustls_config(tls)
}

/// Serves a gRPC router on `listener` until `shutdown` completes, then waits for open
/// calls to finish: with mutual TLS under `tls` when given (see [`grpc_tls_config`]),
/// plaintext otherwise. At most `limits.connections_max` connections are open at once,
/// at most a quarter of them still in their TLS handshake (newer connections evict the
/// oldest handshakes, so silent clients cannot keep others out) and at most
/// `limits.connections_per_peer_max` per client certificate, and one silent for
/// `limits.idle_timeout_ms` is closed. TCP connections get `TCP_NODELAY`.
pub async fn serve_grpc(
    router: Router,
    listener: Listener,
    tls: Option<Arc<ServerConfig>>,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    match (listener, tls) {
        (Listener::Tcp(l), Some(tls)) => {
            let established = tls_established(limited(l, limits), tls, limits);
            router
                .serve_with_incoming_shutdown(established, shutdown)
                .await
        }
        (Listener::Tcp(l), None) => {
            router
                .serve_with_incoming_shutdown(limited(l, limits), shutdown)
                .await
        }
        (Listener::Unix(l), Some(tls)) => {
            let established = tls_established(limited(l, limits), tls, limits);
            router
                .serve_with_incoming_shutdown(established, shutdown)
                .await
        }
        (Listener::Unix(l), None) => {
            router
                .serve_with_incoming_shutdown(limited(l, limits), shutdown)
                .await
        }
    }
}

/// The HTTP listener's mutual TLS: the gRPC listener's material and rules (every client
/// presents a certificate chaining to `tls.ca`), HTTP/1.1 only.
pub fn http_tls_config(tls: &TlsPem) -> Result<Arc<ServerConfig>, TlsConfigError> {
    rustls_server_config(tls, &[b"http/1.1"])
}

/// Bounds on the HTTP listener: its connections, and how long a request's headers may
/// take to arrive.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub connections: ListenerLimits,
    pub header_timeout_ms: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connections: ListenerLimits::default(),
            header_timeout_ms: HEADER_TIMEOUT_MS_DEFAULT,
        }
    }
}

/// Serves an HTTP router on `listener` until `shutdown` completes: on TCP with mutual TLS
/// when `tls` is given (see [`http_tls_config`]), on a Unix socket always plaintext (file
/// permissions decide who connects).
pub async fn serve_http(
    router: axum::Router,
    listener: Listener,
    tls: Option<Arc<ServerConfig>>,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (conns, header_ms) = (limits.connections, limits.header_timeout_ms);
    match (listener, tls) {
        (Listener::Tcp(l), Some(tls)) => {
            let established = tls_established(limited(l, conns), tls, conns);
            serve_http1(established, router, header_ms, shutdown).await
        }
        (Listener::Tcp(l), None) => {
            serve_http1(limited(l, conns), router, header_ms, shutdown).await
        }
        (Listener::Unix(l), _) => serve_http1(limited(l, conns), router, header_ms, shutdown).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_and_unix_addresses() {
        assert_eq!(
            "127.0.0.1:8081".parse::<ListenAddr>().unwrap(),
            ListenAddr::Tcp("127.0.0.1:8081".parse().unwrap())
        );
        assert_eq!(
            "unix:/run/a.sock".parse::<ListenAddr>().unwrap(),
            ListenAddr::Unix("/run/a.sock".into())
        );
        for bad in ["unix:", "localhost:80", "1.2.3.4", ""] {
            let err = bad.parse::<ListenAddr>().unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
        let long = format!("unix:/{}", "a".repeat(LISTEN_ADDR_LEN_MAX));
        assert!(long.parse::<ListenAddr>().is_err());
    }

    #[test]
    fn only_loopback_and_unix_sockets_are_local() {
        for (addr, local) in [
            ("127.0.0.1:1", true),
            ("[::1]:1", true),
            ("unix:/run/a.sock", true),
            ("0.0.0.0:1", false),
            ("10.0.0.7:1", false),
            ("[::]:1", false),
        ] {
            assert_eq!(
                addr.parse::<ListenAddr>().unwrap().is_local(),
                local,
                "{addr}"
            );
        }
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_but_other_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let sock = ListenAddr::Unix(dir.path().join("a.sock"));
        drop(sock.bind().await.unwrap());
        let again = sock.bind().await.unwrap();
        assert_eq!(again.local_addr().unwrap(), sock);
        let file = dir.path().join("plain");
        std::fs::write(&file, "keep").unwrap();
        assert!(ListenAddr::Unix(file.clone()).bind().await.is_err());
        assert_eq!(std::fs::read_to_string(file).unwrap(), "keep");
    }
}
