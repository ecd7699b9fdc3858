//! tonic TLS configurations for mutual TLS, and serving a router on a bound listener.

use std::future::Future;
use std::sync::Once;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::server::{Router, TcpIncoming};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, Server, ServerTlsConfig};

use super::pem::{TlsConfigError, TlsPem};

/// Longest a server waits for a client to finish its TLS handshake, in milliseconds, so a
/// peer that connects and stalls cannot hold a handshake slot forever.
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Makes rustls' `ring` provider the process-wide default, once.
///
/// tonic's server builds its rustls configuration with the process default provider and
/// panics when none is installed and the build enables more than one (for instance when
/// some other dependency turns on `aws-lc-rs`). Every function here that builds a TLS
/// configuration calls this first, so the provider is always `ring` unless the process
/// deliberately installed a different one before; that earlier choice is then kept.
pub fn ensure_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // An error only means a provider is already installed, which is what we want.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Server side of mutual TLS: presents `pem.cert`/`pem.key` and REQUIRES every client to
/// present a certificate that chains to `pem.ca`; a client without one fails the handshake.
///
/// The TLS handshake timeout is [`TLS_HANDSHAKE_TIMEOUT_MS`]; chain `.timeout(..)` to change it.
pub fn server_tls_config(pem: &TlsPem) -> Result<ServerTlsConfig, TlsConfigError> {
    ensure_crypto_provider();
    pem.validate()?;
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(&pem.cert, &pem.key))
        .client_ca_root(Certificate::from_pem(&pem.ca))
        .client_auth_optional(false)
        .timeout(Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS)))
}

/// Client side of mutual TLS: trusts only servers whose certificate chains to `pem.ca` and
/// names `domain_name` (DNS name or IP address SAN), and presents `pem.cert`/`pem.key`.
pub fn client_tls_config(
    pem: &TlsPem,
    domain_name: &str,
) -> Result<ClientTlsConfig, TlsConfigError> {
    ensure_crypto_provider();
    pem.validate()?;
    Ok(client_tls_config_unchecked(pem).domain_name(domain_name))
}

/// [`client_tls_config`] without a domain name and without re-validating `pem`; for callers
/// that validated once and set the domain per connection.
pub(crate) fn client_tls_config_unchecked(pem: &TlsPem) -> ClientTlsConfig {
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pem.ca))
        .identity(Identity::from_pem(&pem.cert, &pem.key))
}

/// A server builder using mutual TLS with `pem`, or plaintext when `pem` is `None`.
///
/// Plaintext servers see no client certificates: pair them with
/// [`AuthMode::Insecure`](super::AuthMode::Insecure) or every call is UNAUTHENTICATED.
pub fn server_builder(pem: Option<&TlsPem>) -> Result<Server, ServeError> {
    let builder = Server::builder();
    match pem {
        None => Ok(builder),
        Some(pem) => {
            let tls = server_tls_config(pem)?;
            builder.tls_config(tls).map_err(ServeError::Transport)
        }
    }
}

/// Serves `router` on an already-bound `listener` until `shutdown` completes, then stops
/// accepting and waits for open connections to finish.
///
/// Binding first (port 0 in tests) lets the caller learn the address before serving.
/// Client certificates reach handlers because the connections are plain TCP streams that
/// tonic wraps in TLS itself. Connections get `TCP_NODELAY`: an answer is a few small frames,
/// and Nagle's algorithm would hold the later ones until the peer's delayed ACK.
pub async fn serve_router(
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    router
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
        .map_err(ServeError::Transport)
}

/// Why a server could not be configured or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    /// tonic rejected the configuration or the server failed.
    #[error("gRPC server: {0}")]
    Transport(#[source] tonic::transport::Error),
}
