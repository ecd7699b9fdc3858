//! Plain rustls configurations for mutual TLS, for connections tonic does not make: the
//! listeners that run their own handshakes, with the same rules as
//! [`server_tls_config`](super::server_tls_config), and clients of the agent's HTTP API.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::pem::{parse_certs, parse_key, PemKind, TlsConfigError, TlsPem};
use super::tls::ensure_crypto_provider;

/// Where the material of these configurations comes from, as errors name it.
const ORIGIN: &str = "in-memory PEM";

fn rejected(kind: PemKind, reason: impl ToString) -> TlsConfigError {
    TlsConfigError::Invalid {
        kind,
        origin: ORIGIN.to_owned(),
        reason: reason.to_string(),
    }
}

/// `pem` checked and parsed: the CAs it trusts, and its own chain and key.
type Material = (
    RootCertStore,
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
);

fn material(pem: &TlsPem) -> Result<Material, TlsConfigError> {
    ensure_crypto_provider();
    pem.validate()?;
    let mut roots = RootCertStore::empty();
    for der in parse_certs(PemKind::Ca, &pem.ca, ORIGIN)? {
        roots.add(der).map_err(|e| rejected(PemKind::Ca, e))?;
    }
    let chain = parse_certs(PemKind::Cert, &pem.cert, ORIGIN)?;
    let key = parse_key(&pem.key, ORIGIN)?;
    Ok((roots, chain, key))
}

/// Presents `pem.cert`/`pem.key`, REQUIRES every client to present a certificate that chains
/// to `pem.ca` (a client without one fails the handshake), and offers `alpn` protocols.
pub fn rustls_server_config(
    pem: &TlsPem,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let (roots, chain, key) = material(pem)?;
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .map_err(|e| rejected(PemKind::Ca, e))?;
    let mut config = ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| rejected(PemKind::Key, e))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// [`rustls_server_config`] for a gRPC listener that runs its own handshakes (see
/// [`tls_established`](super::tls_established)): HTTP/2 offered, as tonic's own TLS does.
pub fn grpc_rustls_config(pem: &TlsPem) -> Result<Arc<ServerConfig>, TlsConfigError> {
    rustls_server_config(pem, &[b"h2"])
}

/// A client trusting servers whose certificate chains to `pem.ca` and presenting
/// `pem.cert`/`pem.key`.
pub fn rustls_client_config(pem: &TlsPem) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let (roots, chain, key) = material(pem)?;
    let config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| rejected(PemKind::Key, e))?;
    Ok(Arc::new(config))
}
