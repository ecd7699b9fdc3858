//! Mutual TLS for every Leasehold connection, roles from client certificates, and a
//! development PKI. Shared by the allocator, the agent and `leasectl`.
//!
//! # Identities
//!
//! Every certificate names one [`PeerIdentity`] (a [`Role`] and a node, holder or operator
//! name) as its only URI subject alternative name, `spiffe://<trust-domain>/<role>/<name>`,
//! e.g. `spiffe://leasehold/agent/gw-7`. Parsing is strict; see [`identity`] for the rules.
//! The certificate chain is checked against the CA during the TLS handshake, so a service
//! trusts [`peer_identity`] and only decides whether the role may call the method
//! ([`require_role`]) and whether a holder acts as itself ([`check_acts_as`]).
//!
//! # Servers
//!
//! [`server_tls_config`] requires a client certificate from every client (no anonymous
//! TLS). [`server_builder`] + [`serve_router`] serve a router on a bound
//! `tokio::net::TcpListener` until a shutdown future completes. Services take an
//! [`AuthMode`] and call [`AuthMode::authorize`] on each request.
//!
//! # Insecure mode
//!
//! **[`AuthMode::Insecure`] and [`ClientTransport::Plaintext`] turn off all authentication
//! and encryption**: every caller of an insecure server is treated as the configured
//! identity. They exist so a local development stack can run the exact production service
//! code without certificates. Binaries must only enable them behind an explicit
//! `--insecure` flag and should log a warning at startup when they do.
//!
//! # Clients
//!
//! [`ChannelFactory`] caches one lazily connected channel per `host:port`, with connect and
//! per-request timeouts, over mutual TLS ([`client_tls_config`]) or plaintext, on TCP or through
//! a custom connector ([`ChannelFactory::with_connector`], e.g. a simulated network).
//!
//! # Crypto provider
//!
//! rustls needs a process-wide crypto provider. Every function here that builds a TLS
//! configuration first calls [`ensure_crypto_provider`], which installs rustls' `ring`
//! provider unless the process already installed one. tonic is built with `tls-ring`.
//!
//! # Development PKI
//!
//! [`DevPki::generate`] makes a CA and per-identity certificates from a [`PkiSpec`], in
//! memory ([`DevPki::tls_pem`]) or on disk ([`DevPki::write_to`]).

mod auth;
mod channel;
pub mod decode_status;
mod http_serve;
pub mod identity;
mod limits;
mod peer;
mod pem;
mod pki;
mod pki_files;
pub mod request_budget;
mod rustls_server;
mod tls;
mod tls_accept;

pub use auth::{
    check_acts_as, check_role, cluster_member_id, is_cluster_allocator, peer_identity,
    require_role, AuthMode,
};
pub use channel::{
    ChannelError, ChannelFactory, ChannelSettings, ClientTransport, ConnectFn, ADDRESS_LEN_MAX,
};
pub use http_serve::{serve_http1, HEADER_TIMEOUT_MS_DEFAULT};
pub use identity::{IdentityError, IdentityUri, PeerIdentity, Role, DEFAULT_TRUST_DOMAIN};
pub use limits::{
    ensure_open_files, fit_connections, limited, Accept, Limited, ListenerLimits, OpenFilesError,
    CONNECTIONS_MAX_DEFAULT, CONNECTIONS_MAX_LIMIT, IDLE_TIMEOUT_MS_DEFAULT, OPEN_FILES_HEADROOM,
};
pub use peer::{source_of, Peer, PeerOf};
pub use pem::{PemKind, TlsConfigError, TlsPaths, TlsPem, PEM_FILE_LEN_MAX};
pub use pki::{
    DevPki, IssuedCert, PkiError, PkiSpec, NOT_BEFORE_BACKDATE_S, PKI_HOSTS_MAX,
    PKI_IDENTITIES_MAX, PKI_VALID_DAYS_MAX,
};
pub use pki_files::{cert_file_name, key_file_name, PkiFilesError, CA_CERT_FILE, CA_KEY_FILE};
pub use rustls::ServerConfig as RustlsServerConfig;
pub use rustls_server::{grpc_rustls_config, rustls_client_config, rustls_server_config};
pub use tls::{
    client_tls_config, ensure_crypto_provider, serve_router, server_builder, server_tls_config,
    ServeError, TLS_HANDSHAKE_TIMEOUT_MS,
};
pub use tls_accept::{
    handshake_stats, handshakes_max_for, tls_established, HandshakeStats, PeerCounted,
    TLS_HANDSHAKES_MAX,
};
