//! The agent's configuration: an optional YAML file (`--config`), overridden field by field
//! by command-line flags, then validated as a whole.
//!
//! ```yaml
//! grpc_addr: 127.0.0.1:8081          # or unix:/run/leasehold/agent-grpc.sock
//! http_addr: 127.0.0.1:8080
//! policies: [/etc/leasehold/tenant-api.yaml]
//! allocators: [global-1:7400, global-2:7400]
//! holder_id: gw-1
//! allocator_tls: { ca: ca.pem, cert: agent-gw-1.pem, key: agent-gw-1-key.pem }
//! listen_tls: { ca: gateways-ca.pem, cert: agent-gw-1.pem, key: agent-gw-1-key.pem }
//! response_headers: true
//! unknown_policy: deny               # or allow: native/HTTP dimensions naming an unknown policy id
//! decide_timeout_ms: 500             # wait for the allocator's decision on exact policies
//! policy_stale_after_ms: 300000      # allocator's policies unconfirmed this long: stale
//! connections_max: 1024              # per listener; idle_timeout_ms, header_timeout_ms too
//! connection_age_max_ms: 600000      # gRPC connections asked to go away after this long
//! ratelimit_key_len_max: 4096        # longest envoyproxy/ratelimit key, bytes once encoded
//! keys_max: 1048576                  # keys held at once; new ones past it share an overflow key
//! ratelimit_count_denied: true       # refused hits count in their window, as that service's
//! acquire_rate_max_per_s: 2000       # first leases asked of the allocator per second
//! acquire_waiting_max: 16384         # keys waiting for a first lease
//! shaped_waiting_max: 1024           # requests admitted with a delay, not yet departed
//! request_bytes_buffered_max: 33554432  # gRPC request bytes buffered at once, all calls
//! request_body_timeout_ms: 10000     # a gRPC request body must arrive whole within this
//! ```
//!
//! `ratelimit_config` (envoyproxy/ratelimit YAML, a file or a directory) is read only with
//! `standalone: true`: agents leasing from allocators get those rules from the allocator
//! (`leasectl policy apply -f <file>`), so that every agent shares one budget per rule.
//!
//! Every field has a flag of the same name (`--grpc-addr`, `--policy` for each entry of
//! `policies`, `--allocator`, `--ca/--cert/--key` for `allocator_tls`, `--tls-ca/--tls-cert/
//! --tls-key` for `listen_tls`, ...). A flag replaces the file's value; a repeated flag
//! replaces the file's whole list. Relative paths are relative to the working directory.
//! Unknown fields are refused, naming the field, so a misspelt setting never silently
//! falls back to its default.

/// Default most first leases asked for per second (see [`AgentConfig::acquire_rate_max_per_s`]).
pub const ACQUIRE_RATE_MAX_PER_S_DEFAULT: u64 = 2_000;
/// Default time after which unconfirmed allocator policies count as stale: 5 minutes.
pub const POLICY_STALE_AFTER_MS_DEFAULT: u64 = 300_000;
/// Allowed `policy_stale_after_ms`: twice the allocator's 5 s watch heartbeat, so a healthy
/// agent never counts as stale, to a day.
pub const POLICY_STALE_AFTER_MS_RANGE: std::ops::RangeInclusive<u64> = 10_000..=86_400_000;
/// Allowed `keys_max`: a thousand to 16 million keys (about 3.2 GB of key table).
pub const KEYS_MAX_RANGE: std::ops::RangeInclusive<usize> = 1_024..=16_777_216;
/// Default most keys waiting for a first lease.
pub const ACQUIRE_WAITING_MAX_DEFAULT: usize = 16_384;
/// Highest `acquire_waiting_max`: the keys a default key table holds.
pub const ACQUIRE_WAITING_LIMIT: usize = crate::engine::KEYS_MAX_DEFAULT;
/// Highest `shaped_waiting_max`: every waiting request's departure is kept, and checked
/// on each shaped admission.
pub const SHAPED_WAITING_LIMIT: usize = 65_536;

mod overrides;
mod validate;

#[cfg(test)]
mod tests;

use crate::api::listen::{HttpLimits, ListenAddr};
use crate::api::request_budget::{
    RequestBudget, REQUEST_BODY_TIMEOUT_MS_DEFAULT, REQUEST_BYTES_BUFFERED_MAX_DEFAULT,
};
pub use crate::engine::UnknownPolicy;
use leasehold_common::lease::LeaseVerifier;
use leasehold_proto::transport::{
    fit_connections, ClientTransport, ListenerLimits, OpenFilesError, TlsConfigError, TlsPaths,
    TlsPem, CONNECTIONS_MAX_DEFAULT, HEADER_TIMEOUT_MS_DEFAULT, IDLE_TIMEOUT_MS_DEFAULT,
};
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

pub use overrides::Overrides;
pub use validate::{ALLOCATORS_MAX, PATH_LEN_MAX, POLICY_FILES_MAX};

/// Largest config file read, in bytes.
pub const CONFIG_FILE_LEN_MAX: u64 = 1024 * 1024;
/// gRPC listener when none is configured (envoyproxy/ratelimit's gRPC port, loopback only).
pub const GRPC_ADDR_DEFAULT: &str = "127.0.0.1:8081";
/// HTTP listener when none is configured (envoyproxy/ratelimit's HTTP port, loopback only).
pub const HTTP_ADDR_DEFAULT: &str = "127.0.0.1:8080";
/// Holder id when none is configured.
pub const HOLDER_ID_DEFAULT: &str = "agent";

/// Why the configuration could not be read or is not acceptable.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`CONFIG_FILE_LEN_MAX`].
    #[error("config file {path} is larger than {max_bytes} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        max_bytes: u64,
    },
    /// Not YAML, an unknown field, or a value of the wrong type; the message names the field.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file (`<inline>` for text given directly).
        path: PathBuf,
        /// The parser's message, with the field and the position.
        message: String,
    },
    /// A field's value is not acceptable.
    #[error("config field `{field}` = {value}: {reason}")]
    Invalid {
        /// The field, dotted for nested ones (`listen_tls.ca`).
        field: &'static str,
        /// The offending value, as written.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// The PEM files a TLS field names are missing or unusable.
    #[error("config field `{field}`: {source}")]
    Tls {
        /// `allocator_tls` or `listen_tls`.
        field: &'static str,
        /// What is wrong with the files.
        #[source]
        source: TlsConfigError,
    },
}

/// Paths of the PEM files of one side of mutual TLS.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// CA bundle that peers' certificates must chain to.
    pub ca: PathBuf,
    /// This agent's certificate chain, leaf first.
    pub cert: PathBuf,
    /// This agent's private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// Reads and checks the three files.
    pub fn load(&self) -> Result<TlsPem, TlsConfigError> {
        TlsPaths {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
        .load()
    }
}

/// Everything the agent is told at startup.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// gRPC listener (Envoy RLS and native Admit): `ip:port` or `unix:/path`.
    pub grpc_addr: String,
    /// HTTP listener (`/v1/admit`, `/metrics`, `/healthz`): `ip:port` or `unix:/path`.
    pub http_addr: String,
    /// envoyproxy/ratelimit YAML: one file, or a directory of them; `standalone` only.
    pub ratelimit_config: Option<PathBuf>,
    /// Leasehold policy YAML files, one policy each.
    pub policies: Vec<PathBuf>,
    /// Lease from a ledger in this process instead of an allocator cluster.
    pub standalone: bool,
    /// Allocator addresses (`host:port`) to lease credit from.
    pub allocators: Vec<String>,
    /// This agent's holder id: its certificate's name under mutual TLS.
    pub holder_id: String,
    /// Mutual TLS towards the allocators; required unless `insecure` or `standalone`.
    pub allocator_tls: Option<TlsFiles>,
    /// **INSECURE**: talk to the allocators in plaintext (a cluster started with `insecure`).
    pub insecure: bool,
    /// Add `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers to Envoy
    /// rate-limit responses.
    pub response_headers: bool,
    /// Mutual TLS on the gRPC listener: gateways must present a certificate from `ca`.
    pub listen_tls: Option<TlsFiles>,
    /// **INSECURE**: serve gRPC in plaintext on an address other hosts can reach.
    pub listen_insecure: bool,
    /// Where the lease manager keeps its crash-safety state, if anywhere.
    pub state_file: Option<PathBuf>,
    /// Public keys (hex of 32-byte Ed25519 keys) the allocators sign leases with; when
    /// set, a lease without a valid signature by one of them is never spent.
    pub allocator_keys: Vec<String>,
    /// What native Admit and HTTP dimensions naming a policy id the agent does not have
    /// get: `deny` (the default) or `allow` (admitted as no rule). Envoy RLS descriptors
    /// without a rule are always allowed.
    pub unknown_policy: UnknownPolicy,
    /// How long a request of an exact policy (`enforcement: exact`) waits for the
    /// allocator's decision before the policy's failure behaviour applies, in
    /// milliseconds.
    pub decide_timeout_ms: u64,
    /// Policies taken from the allocator count as stale once its watch stream has not
    /// confirmed them for this long, in milliseconds (exported for alerting; the agent
    /// goes on enforcing them).
    pub policy_stale_after_ms: u64,
    /// Connections each listener (gRPC, HTTP) keeps open at once; more wait in the kernel's
    /// backlog. The process raises its open-file limit to fit both, or refuses to start.
    /// Unset: 1 024, lowered (with a warning) as far as the open-file hard limit requires.
    pub connections_max: Option<usize>,
    /// Connections one client certificate may keep open at once on each TLS listener;
    /// more are closed once their handshake names the certificate. Unset: only
    /// `connections_max` bounds them, since gateways' certificates come from the
    /// operator's CA and many gateways may share one.
    pub connections_per_peer_max: Option<usize>,
    /// A connection silent (nothing read or written) this long is closed, in milliseconds.
    pub idle_timeout_ms: u64,
    /// A gRPC connection open this long is asked to go away (HTTP/2 GOAWAY; its calls in
    /// flight get `CONNECTION_AGE_GRACE_MS` more), in milliseconds: however it trickles,
    /// no client keeps a connection slot for longer.
    pub connection_age_max_ms: u64,
    /// An HTTP request's headers must arrive within this many milliseconds.
    pub header_timeout_ms: u64,
    /// Longest key of an envoyproxy/ratelimit rule, in bytes once encoded; a descriptor
    /// whose key would be longer is answered OVER_LIMIT.
    pub ratelimit_key_len_max: usize,
    /// Most keys the agent holds at once (about 200 bytes each); past it a new key is
    /// counted on its policy's overflow key until a held one can be forgotten.
    pub keys_max: usize,
    /// envoyproxy/ratelimit rules count hits they refuse, as that service does (false: as
    /// with its `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub ratelimit_count_denied: bool,
    /// Most first leases the lease manager asks the allocator for per second; keys that
    /// hold leases are renewed apart and first, so a spray of new keys waits here.
    pub acquire_rate_max_per_s: u64,
    /// Most keys waiting for a first lease; past it, keys asked for only once go back to
    /// ask again on their next request.
    pub acquire_waiting_max: usize,
    /// Most requests admitted with a delay by shaping policies and not departed yet; 0
    /// turns shaping off.
    pub shaped_waiting_max: usize,
    /// Request bytes the gRPC listener buffers at once across all connections and calls;
    /// a call whose next bytes do not fit is answered RESOURCE_EXHAUSTED.
    pub request_bytes_buffered_max: usize,
    /// A gRPC request body not complete this many milliseconds after its headers is
    /// answered DEADLINE_EXCEEDED and its bytes freed.
    pub request_body_timeout_ms: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            grpc_addr: GRPC_ADDR_DEFAULT.to_owned(),
            http_addr: HTTP_ADDR_DEFAULT.to_owned(),
            ratelimit_config: None,
            policies: Vec::new(),
            standalone: false,
            allocators: Vec::new(),
            holder_id: HOLDER_ID_DEFAULT.to_owned(),
            allocator_tls: None,
            insecure: false,
            response_headers: false,
            listen_tls: None,
            listen_insecure: false,
            state_file: None,
            allocator_keys: Vec::new(),
            unknown_policy: UnknownPolicy::Deny,
            decide_timeout_ms: crate::exact::DECIDE_TIMEOUT_MS_DEFAULT,
            policy_stale_after_ms: POLICY_STALE_AFTER_MS_DEFAULT,
            connections_max: None,
            connections_per_peer_max: None,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            connection_age_max_ms: crate::api::listen::CONNECTION_AGE_MAX_MS_DEFAULT,
            header_timeout_ms: HEADER_TIMEOUT_MS_DEFAULT,
            ratelimit_key_len_max: crate::engine::ENVOY_KEY_LEN_MAX_DEFAULT,
            keys_max: crate::engine::KEYS_MAX_DEFAULT,
            ratelimit_count_denied: true,
            acquire_rate_max_per_s: ACQUIRE_RATE_MAX_PER_S_DEFAULT,
            acquire_waiting_max: ACQUIRE_WAITING_MAX_DEFAULT,
            shaped_waiting_max: crate::engine::SHAPED_WAITING_MAX_DEFAULT,
            request_bytes_buffered_max: REQUEST_BYTES_BUFFERED_MAX_DEFAULT,
            request_body_timeout_ms: REQUEST_BODY_TIMEOUT_MS_DEFAULT,
        }
    }
}

impl AgentConfig {
    /// Parses a config file's text; `path` names it in errors. Not validated: flags may
    /// still change it (see [`AgentConfig::resolve`]).
    pub fn from_yaml(path: &Path, text: &str) -> Result<AgentConfig, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        };
        // A file of only comments is a valid (empty) configuration.
        let parsed: Option<AgentConfig> =
            serde_norway::from_str(text).map_err(|e| parse_error(e.to_string()))?;
        Ok(parsed.unwrap_or_default())
    }

    /// Reads and parses a config file of at most [`CONFIG_FILE_LEN_MAX`] bytes.
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let read_error = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let mut text = String::new();
        // Reading one byte past the limit tells a file at the limit from a larger one
        // without trusting metadata (a FIFO or /proc file reports no length).
        file.take(CONFIG_FILE_LEN_MAX + 1)
            .read_to_string(&mut text)
            .map_err(read_error)?;
        if text.len() as u64 > CONFIG_FILE_LEN_MAX {
            return Err(ConfigError::TooLarge {
                path: path.to_path_buf(),
                max_bytes: CONFIG_FILE_LEN_MAX,
            });
        }
        Self::from_yaml(path, &text)
    }

    /// The file at `file` (or the defaults), with `flags` applied, validated.
    pub fn resolve(file: Option<&Path>, flags: Overrides) -> Result<AgentConfig, ConfigError> {
        let mut cfg = match file {
            Some(path) => Self::load(path)?,
            None => AgentConfig::default(),
        };
        cfg.apply(flags);
        cfg.validate()?;
        Ok(cfg)
    }

    /// The budget of request bytes shared by the gRPC services.
    pub fn request_budget(&self) -> RequestBudget {
        RequestBudget::new(
            self.request_bytes_buffered_max,
            self.request_body_timeout_ms,
        )
    }

    /// Bounds on the gRPC listener's connections, with `connections_max` as fitted to the
    /// open-file limit ([`fit_connections`]).
    pub fn grpc_limits(&self, connections_max: usize) -> ListenerLimits {
        ListenerLimits {
            connections_max,
            idle_timeout_ms: self.idle_timeout_ms,
            connections_per_peer_max: self.connections_per_peer_max,
        }
    }

    /// Bounds on the HTTP listener (see [`grpc_limits`](Self::grpc_limits)).
    pub fn http_limits(&self, connections_max: usize) -> HttpLimits {
        HttpLimits {
            connections: self.grpc_limits(connections_max),
            header_timeout_ms: self.header_timeout_ms,
        }
    }

    /// The connections each listener may hold: the configured cap (the open-file limit
    /// raised to fit both listeners) or the default fitted to the hard limit.
    pub fn fit_connections(&self) -> Result<usize, OpenFilesError> {
        fit_connections(self.connections_max, CONNECTIONS_MAX_DEFAULT, 2)
    }

    /// The gRPC listen address.
    pub fn grpc_listen(&self) -> Result<ListenAddr, ConfigError> {
        validate::listen_addr("grpc_addr", &self.grpc_addr)
    }

    /// The HTTP listen address.
    pub fn http_listen(&self) -> Result<ListenAddr, ConfigError> {
        validate::listen_addr("http_addr", &self.http_addr)
    }

    /// The gRPC listener's TLS material: `None` serves plaintext.
    pub fn listen_tls_pem(&self) -> Result<Option<TlsPem>, ConfigError> {
        self.listen_tls
            .as_ref()
            .map(|files| {
                files.load().map_err(|source| ConfigError::Tls {
                    field: "listen_tls",
                    source,
                })
            })
            .transpose()
    }

    /// How to reach the allocators: mutual TLS with `allocator_tls`, or plaintext when
    /// `insecure`. Call on a validated configuration of a non-standalone agent.
    /// The verifier of lease signatures, when `allocator_keys` are set.
    pub fn lease_verifier(&self) -> Result<Option<LeaseVerifier>, ConfigError> {
        if self.allocator_keys.is_empty() {
            return Ok(None);
        }
        let mut v = LeaseVerifier::new();
        for (i, text) in self.allocator_keys.iter().enumerate() {
            let bad = |reason: String| {
                validate::invalid("allocator_keys", format!("entry {i}: {text}"), reason)
            };
            let bytes = hex::decode(text.trim()).map_err(|e| bad(format!("not hex: {e}")))?;
            v.trust(&bytes).map_err(|e| bad(e.to_string()))?;
        }
        Ok(Some(v))
    }

    pub fn allocator_transport(&self) -> Result<ClientTransport, ConfigError> {
        match (&self.allocator_tls, self.insecure) {
            (_, true) => Ok(ClientTransport::Plaintext),
            (Some(files), false) => {
                let pem = files.load().map_err(|source| ConfigError::Tls {
                    field: "allocator_tls",
                    source,
                })?;
                Ok(ClientTransport::MutualTls {
                    pem,
                    server_name: None,
                })
            }
            (None, false) => Err(validate::invalid(
                "allocator_tls",
                "(none)",
                "required unless `insecure: true` or `standalone: true`",
            )),
        }
    }
}
