//! Client channels: one cached tonic [`Channel`] per server address, over mutual TLS or
//! plaintext, with connect and per-request timeouts.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use tonic::codegen::Service;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, Uri};

use super::pem::{TlsConfigError, TlsPem};
use super::tls::{client_tls_config_unchecked, ensure_crypto_provider};

/// Longest server address accepted, in bytes.
pub const ADDRESS_LEN_MAX: usize = 255;

/// Limits and timeouts of a [`ChannelFactory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelSettings {
    /// Longest wait for the server's name to resolve and its TCP connection to be
    /// established, in milliseconds; the TLS handshake then has as long again. Calls queued
    /// on the channel meanwhile wait for the connection too.
    pub connect_timeout_ms: u64,
    /// Deadline of each request, in milliseconds; sent to the server as `grpc-timeout`.
    pub request_timeout_ms: u64,
    /// Most addresses kept in the cache; the least recently used is dropped beyond it.
    pub channels_max: usize,
    /// HTTP/2 PING sent on a connection this often, idle or not, in milliseconds.
    pub keepalive_interval_ms: u64,
    /// A PING not answered within this long closes the connection, in milliseconds; the
    /// next request connects afresh. Without it, a connection whose peer vanished without a
    /// reset (a partition that drops packets, a host gone) would take every request until
    /// TCP gave up on it, many minutes later.
    pub keepalive_timeout_ms: u64,
}

impl Default for ChannelSettings {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 2_000,
            request_timeout_ms: 5_000,
            channels_max: 64,
            keepalive_interval_ms: 1_000,
            keepalive_timeout_ms: 2_000,
        }
    }
}

/// How a [`ChannelFactory`] reaches servers.
#[derive(Clone, Debug)]
pub enum ClientTransport {
    /// Mutual TLS with this endpoint's PEM material. The server name checked against the
    /// server's certificate is `server_name` when set, else the host part of the address.
    MutualTls {
        /// CA, client certificate and key.
        pem: TlsPem,
        /// Name to verify instead of the address's host (e.g. a DNS name behind an IP).
        server_name: Option<String>,
    },
    /// **INSECURE — development only**: plaintext HTTP/2, no server authentication, no
    /// client certificate. Only for servers started with an explicit `--insecure`.
    Plaintext,
}

/// Why a channel could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// A setting is out of range.
    #[error("channel setting `{field}` = {value} is invalid: {reason}")]
    InvalidSetting {
        /// The setting's name.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// The TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    /// The address is not `host:port`.
    #[error("server address `{address}` is invalid: {reason}")]
    InvalidAddress {
        /// The offending address (truncated to [`ADDRESS_LEN_MAX`] bytes).
        address: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// tonic rejected the endpoint.
    #[error("server address `{address}`: {source}")]
    Endpoint {
        /// The address.
        address: String,
        /// tonic's error.
        source: tonic::transport::Error,
    },
}

/// Makes a lazily connected [`Channel`] from a fully configured [`Endpoint`] (address,
/// timeouts, TLS) over a transport other than the host's TCP stack, typically
/// `move |endpoint| endpoint.connect_with_connector_lazy(connector.clone())` with a tower
/// `Service<Uri>` that opens the stream (an in-process pipe, a simulated network).
pub type ConnectFn = dyn Fn(&Endpoint) -> Channel + Send + Sync;

/// Hands out one shared [`Channel`] per server address.
///
/// Channels connect lazily: [`ChannelFactory::channel`] never waits on the network, a
/// connection is made (within `connect_timeout_ms`) on first use and re-made after failures,
/// and connection errors surface as UNAVAILABLE on the calls themselves. Dropping a channel
/// from the cache does not close it for callers still holding a clone.
#[derive(Debug)]
pub struct ChannelFactory {
    settings: ChannelSettings,
    scheme: &'static str,
    tls: Option<(ClientTlsConfig, Option<String>)>,
    connector: Option<Connector>,
    cache: Mutex<Cache>,
}

/// A custom [`ConnectFn`]; `None` in a factory means TCP.
#[derive(Clone)]
struct Connector(Arc<ConnectFn>);

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connector(custom)")
    }
}

#[derive(Debug, Default)]
struct Cache {
    /// Address → (channel, tick of last use).
    channels: HashMap<String, (Channel, u64)>,
    tick: u64,
}

impl ChannelFactory {
    /// A factory with validated settings and TLS material.
    pub fn new(
        settings: ChannelSettings,
        transport: ClientTransport,
    ) -> Result<Self, ChannelError> {
        check_positive("connect_timeout_ms", settings.connect_timeout_ms)?;
        check_positive("request_timeout_ms", settings.request_timeout_ms)?;
        check_positive("keepalive_interval_ms", settings.keepalive_interval_ms)?;
        check_positive("keepalive_timeout_ms", settings.keepalive_timeout_ms)?;
        check_positive("channels_max", settings.channels_max as u64)?;
        let (scheme, tls) = match transport {
            ClientTransport::Plaintext => ("http", None),
            ClientTransport::MutualTls { pem, server_name } => {
                ensure_crypto_provider();
                pem.validate()?;
                (
                    "https",
                    Some((client_tls_config_unchecked(&pem), server_name)),
                )
            }
        };
        Ok(Self {
            settings,
            scheme,
            tls,
            connector: None,
            cache: Mutex::new(Cache::default()),
        })
    }

    /// Connects through `connect` instead of TCP, keeping everything else (address checks,
    /// timeouts, TLS, the cache) as it is. Channels already cached are dropped.
    pub fn with_connector(
        mut self,
        connect: impl Fn(&Endpoint) -> Channel + Send + Sync + 'static,
    ) -> Self {
        self.connector = Some(Connector(Arc::new(connect)));
        self.cache = Mutex::new(Cache::default());
        self
    }

    /// The settings this factory was built with.
    pub fn settings(&self) -> ChannelSettings {
        self.settings
    }

    /// The channel to `address` (`host:port`, `[v6]:port`), made on first request.
    ///
    /// Must be called inside a tokio runtime: a new channel spawns its worker task.
    pub fn channel(&self, address: &str) -> Result<Channel, ChannelError> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.tick += 1;
        let tick = cache.tick;
        if let Some((channel, last_used)) = cache.channels.get_mut(address) {
            *last_used = tick;
            return Ok(channel.clone());
        }
        let channel = self.connect_lazy(address)?;
        if cache.channels.len() >= self.settings.channels_max {
            cache.evict_least_recently_used();
        }
        cache
            .channels
            .insert(address.to_owned(), (channel.clone(), tick));
        Ok(channel)
    }

    /// Drops the cached channel to `address`, if any, so the next call makes a new one
    /// (e.g. after the server's certificate was rotated).
    pub fn forget(&self, address: &str) -> bool {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.channels.remove(address).is_some()
    }

    /// How many channels are cached.
    pub fn cached_len(&self) -> usize {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.channels.len()
    }

    fn connect_lazy(&self, address: &str) -> Result<Channel, ChannelError> {
        let host = parse_host(address)?;
        let uri = format!("{}://{address}", self.scheme);
        let endpoint_err = |source| ChannelError::Endpoint {
            address: address.to_owned(),
            source,
        };
        let connect_timeout = Duration::from_millis(self.settings.connect_timeout_ms);
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(endpoint_err)?
            .connect_timeout(connect_timeout)
            .timeout(Duration::from_millis(self.settings.request_timeout_ms))
            .http2_keep_alive_interval(Duration::from_millis(self.settings.keepalive_interval_ms))
            .keep_alive_timeout(Duration::from_millis(self.settings.keepalive_timeout_ms))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if let Some((tls, server_name)) = &self.tls {
            let name = server_name.as_deref().unwrap_or(host);
            endpoint = endpoint
                .tls_config(tls.clone().domain_name(name))
                .map_err(endpoint_err)?;
        }
        Ok(match &self.connector {
            Some(Connector(connect)) => connect(&endpoint),
            // Resolution and TCP within the connect timeout, everything with TLS within twice it.
            None => endpoint
                .connect_timeout(2 * connect_timeout)
                .connect_with_connector_lazy(TcpConnect::new(connect_timeout)),
        })
    }
}

/// TCP as tonic's own `connect_lazy` opens it, with name resolution and the connect within
/// one deadline. tonic's own connector bounds only each `connect(2)`, and nothing bounded the
/// TLS handshake after it, so a peer whose kernel still accepts connections while the process
/// answers nothing (stopped, hung, an accept queue nobody drains) held every call to its
/// address until it woke up. Used as a custom connector, it gets tonic's TLS on top and the
/// endpoint's connect timeout around both. A failure here is UNAVAILABLE on the calls, as
/// with tonic's own connector; a TLS handshake that runs out of time is UNKNOWN.
#[derive(Clone)]
struct TcpConnect {
    http: HttpConnector,
    timeout: Duration,
}

impl TcpConnect {
    fn new(timeout: Duration) -> Self {
        let mut http = HttpConnector::new();
        // The scheme is `https` under TLS, which tonic's connector layers on top of this one.
        http.enforce_http(false);
        http.set_nodelay(true);
        TcpConnect { http, timeout }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Service<Uri> for TcpConnect {
    type Response = <HttpConnector as Service<Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("not connected within {} ms", timeout.as_millis()),
                )) as BoxError),
            }
        })
    }
}

impl Cache {
    fn evict_least_recently_used(&mut self) {
        // O(channels_max) per miss on a full cache; the cache is small and misses are rare.
        let oldest = self
            .channels
            .iter()
            .min_by_key(|(_, (_, last_used))| *last_used)
            .map(|(address, _)| address.clone());
        if let Some(address) = oldest {
            self.channels.remove(&address);
        }
    }
}

fn check_positive(field: &'static str, value: u64) -> Result<(), ChannelError> {
    if value == 0 {
        return Err(ChannelError::InvalidSetting {
            field,
            value,
            reason: "must be greater than zero",
        });
    }
    Ok(())
}

/// The host of `host:port` / `[v6]:port` (without brackets), after checking the shape.
fn parse_host(address: &str) -> Result<&str, ChannelError> {
    let invalid = |reason| ChannelError::InvalidAddress {
        address: truncate(address).to_owned(),
        reason,
    };
    if address.len() > ADDRESS_LEN_MAX {
        return Err(invalid("longer than 255 bytes"));
    }
    if address.contains("://") {
        return Err(invalid(
            "give `host:port` without a scheme; TLS or not is configured",
        ));
    }
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| invalid("missing `:port`"))?;
    if !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(invalid("port must be 1-65535"));
    }
    let (host, host_ok) = match host.strip_prefix('[') {
        Some(bracketed) => {
            let v6 = bracketed
                .strip_suffix(']')
                .ok_or_else(|| invalid("unclosed `[` in IPv6 host"))?;
            (v6, v6.parse::<std::net::Ipv6Addr>().is_ok())
        }
        // Unbracketed hosts are DNS names or IPv4 addresses; a bare IPv6 is ambiguous.
        None => (
            host,
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')),
        ),
    };
    if !host_ok {
        return Err(invalid(
            "host must be a DNS name, an IPv4 address or a bracketed IPv6",
        ));
    }
    Ok(host)
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(ADDRESS_LEN_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_custom_connector_makes_each_channel_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let made = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&made);
        let factory = ChannelFactory::new(ChannelSettings::default(), ClientTransport::Plaintext)
            .unwrap()
            .with_connector(move |endpoint| {
                assert_eq!(endpoint.uri().to_string(), "http://sim-host:7000/");
                seen.fetch_add(1, Ordering::SeqCst);
                endpoint.connect_lazy()
            });
        factory.channel("sim-host:7000").unwrap();
        factory.channel("sim-host:7000").unwrap();
        assert_eq!(
            made.load(Ordering::SeqCst),
            1,
            "the second call is served from the cache"
        );
        assert!(factory.channel("bad address").is_err());
        assert_eq!(
            made.load(Ordering::SeqCst),
            1,
            "addresses are checked first"
        );
    }

    #[test]
    fn hosts_are_extracted_from_valid_addresses() {
        assert_eq!(parse_host("localhost:7000").unwrap(), "localhost");
        assert_eq!(parse_host("10.0.0.1:1").unwrap(), "10.0.0.1");
        assert_eq!(parse_host("[::1]:65535").unwrap(), "::1");
    }

    #[test]
    fn malformed_addresses_are_rejected() {
        for bad in [
            "localhost",
            "localhost:0",
            "localhost:65536",
            "localhost:x",
            "localhost:+80",
            ":7000",
            "https://localhost:7000",
            "[::1:7000",
            "a b:7000",
            "host/path:7000",
            "::1:7000",
            "[not-v6]:7000",
        ] {
            assert!(
                matches!(parse_host(bad), Err(ChannelError::InvalidAddress { .. })),
                "{bad} was accepted"
            );
        }
        let long = format!("{}:1", "a".repeat(ADDRESS_LEN_MAX));
        assert!(parse_host(&long).is_err());
    }
}
