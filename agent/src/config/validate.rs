//! Checks of a whole [`AgentConfig`]: every error names the field, the value and the reason.

use super::{AgentConfig, ConfigError, TlsFiles};
use crate::api::listen::ListenAddr;
use leasehold_proto::transport::identity::validate_name;
use leasehold_proto::transport::ADDRESS_LEN_MAX;
use leasehold_proto::transport::CONNECTIONS_MAX_LIMIT;
use std::path::Path;

/// Longest wait for an exact decision, in milliseconds: a request waiting longer has
/// long been given up by its caller.
/// Shortest `ratelimit_key_len_max`: room for a rule's policy id and a short value.
pub const RATELIMIT_KEY_LEN_MIN: usize = 128;
/// Longest `ratelimit_key_len_max`: a request (64 KiB at most) cannot carry a longer key.
pub const RATELIMIT_KEY_LEN_LIMIT: usize = 65_536;
pub const DECIDE_TIMEOUT_MS_MAX: u64 = 60_000;
/// Most policy files.
pub const POLICY_FILES_MAX: usize = 1024;
/// Most allocator addresses.
pub const ALLOCATORS_MAX: usize = 16;
/// Longest file path accepted, in bytes (Linux's `PATH_MAX`).
pub const PATH_LEN_MAX: usize = 4096;

pub(super) fn invalid(
    field: &'static str,
    value: impl std::fmt::Display,
    reason: impl Into<String>,
) -> ConfigError {
    ConfigError::Invalid {
        field,
        value: value.to_string(),
        reason: reason.into(),
    }
}

pub(super) fn listen_addr(field: &'static str, text: &str) -> Result<ListenAddr, ConfigError> {
    text.parse::<ListenAddr>().map_err(|e| match e {
        crate::api::listen::ListenError::Parse { addr, reason } => invalid(field, addr, reason),
        other => invalid(field, text, other.to_string()),
    })
}

/// Longest idle or header timeout a configuration may set: a day, in milliseconds.
pub const LISTENER_TIMEOUT_MS_MAX: u64 = 86_400_000;
/// Smallest `request_bytes_buffered_max`: room for a few of the largest messages.
pub const REQUEST_BYTES_BUFFERED_MIN: usize = 4 * crate::api::listen::GRPC_MESSAGE_LEN_MAX;
/// Largest `request_bytes_buffered_max`: 1 TiB, far past any machine the agent runs on.
pub const REQUEST_BYTES_BUFFERED_LIMIT: usize = 1 << 40;
/// Longest `request_body_timeout_ms`: a minute; an honest body arrives with its headers.
pub const REQUEST_BODY_TIMEOUT_MS_MAX: u64 = 60_000;

impl AgentConfig {
    fn check_listener_limits(&self) -> Result<(), ConfigError> {
        for (field, n) in [
            ("connections_max", self.connections_max),
            ("connections_per_peer_max", self.connections_per_peer_max),
        ] {
            if let Some(n) = n {
                if !(1..=CONNECTIONS_MAX_LIMIT).contains(&n) {
                    return Err(invalid(
                        field,
                        n.to_string(),
                        format!("1 to {CONNECTIONS_MAX_LIMIT}"),
                    ));
                }
            }
        }
        for (field, ms) in [
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("header_timeout_ms", self.header_timeout_ms),
            ("connection_age_max_ms", self.connection_age_max_ms),
        ] {
            if !(1..=LISTENER_TIMEOUT_MS_MAX).contains(&ms) {
                return Err(invalid(
                    field,
                    ms.to_string(),
                    format!("1 to {LISTENER_TIMEOUT_MS_MAX}"),
                ));
            }
        }
        let bytes = self.request_bytes_buffered_max;
        if !(REQUEST_BYTES_BUFFERED_MIN..=REQUEST_BYTES_BUFFERED_LIMIT).contains(&bytes) {
            return Err(invalid(
                "request_bytes_buffered_max",
                bytes,
                format!("{REQUEST_BYTES_BUFFERED_MIN} to {REQUEST_BYTES_BUFFERED_LIMIT} bytes"),
            ));
        }
        let ms = self.request_body_timeout_ms;
        if !(1..=REQUEST_BODY_TIMEOUT_MS_MAX).contains(&ms) {
            return Err(invalid(
                "request_body_timeout_ms",
                ms,
                format!("1 to {REQUEST_BODY_TIMEOUT_MS_MAX}"),
            ));
        }
        Ok(())
    }

    /// Checks every field and the combinations between them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let grpc = self.grpc_listen()?;
        let http = self.http_listen()?;
        let ephemeral = matches!(&grpc, ListenAddr::Tcp(a) if a.port() == 0);
        if grpc == http && !ephemeral {
            return Err(invalid(
                "http_addr",
                &self.http_addr,
                "the same address as grpc_addr",
            ));
        }
        if !(1..=DECIDE_TIMEOUT_MS_MAX).contains(&self.decide_timeout_ms) {
            return Err(invalid(
                "decide_timeout_ms",
                self.decide_timeout_ms.to_string(),
                format!("1 to {DECIDE_TIMEOUT_MS_MAX}"),
            ));
        }
        if !super::POLICY_STALE_AFTER_MS_RANGE.contains(&self.policy_stale_after_ms) {
            return Err(invalid(
                "policy_stale_after_ms",
                self.policy_stale_after_ms.to_string(),
                "10000 to 86400000 milliseconds",
            ));
        }
        self.check_listener_limits()?;
        if self.acquire_rate_max_per_s == 0 {
            return Err(invalid(
                "acquire_rate_max_per_s",
                0,
                "a positive number of first leases per second",
            ));
        }
        if !(1..=super::ACQUIRE_WAITING_LIMIT).contains(&self.acquire_waiting_max) {
            return Err(invalid(
                "acquire_waiting_max",
                self.acquire_waiting_max.to_string(),
                format!("1 to {}", super::ACQUIRE_WAITING_LIMIT),
            ));
        }
        if self.shaped_waiting_max > super::SHAPED_WAITING_LIMIT {
            return Err(invalid(
                "shaped_waiting_max",
                self.shaped_waiting_max.to_string(),
                format!("0 to {}", super::SHAPED_WAITING_LIMIT),
            ));
        }
        if !(RATELIMIT_KEY_LEN_MIN..=RATELIMIT_KEY_LEN_LIMIT).contains(&self.ratelimit_key_len_max)
        {
            return Err(invalid(
                "ratelimit_key_len_max",
                self.ratelimit_key_len_max.to_string(),
                format!("{RATELIMIT_KEY_LEN_MIN} to {RATELIMIT_KEY_LEN_LIMIT} bytes"),
            ));
        }
        if !super::KEYS_MAX_RANGE.contains(&self.keys_max) {
            return Err(invalid(
                "keys_max",
                self.keys_max.to_string(),
                "1024 to 16777216 keys",
            ));
        }
        validate_name(&self.holder_id)
            .map_err(|e| invalid("holder_id", &self.holder_id, e.to_string()))?;
        self.check_files()?;
        self.check_grantor()?;
        if self.standalone && !self.allocator_keys.is_empty() {
            return Err(invalid(
                "allocator_keys",
                self.allocator_keys.join(","),
                "not used with `standalone: true` (leases come from this process)",
            ));
        }
        self.lease_verifier()?;
        self.check_listener("grpc_addr", &self.grpc_addr, &grpc)?;
        self.check_listener("http_addr", &self.http_addr, &http)
    }

    fn check_files(&self) -> Result<(), ConfigError> {
        if self.policies.len() > POLICY_FILES_MAX {
            return Err(invalid(
                "policies",
                format!("{} files", self.policies.len()),
                format!("at most {POLICY_FILES_MAX} policy files"),
            ));
        }
        for p in &self.policies {
            path("policies", p)?;
        }
        if let Some(p) = &self.ratelimit_config {
            path("ratelimit_config", p)?;
        }
        if let Some(p) = &self.state_file {
            path("state_file", p)?;
        }
        for (field, tls) in [
            ("allocator_tls", &self.allocator_tls),
            ("listen_tls", &self.listen_tls),
        ] {
            if let Some(files) = tls {
                tls_paths(field, files)?;
            }
        }
        Ok(())
    }

    /// A standalone agent leases from itself; any other needs allocators and a transport.
    fn check_grantor(&self) -> Result<(), ConfigError> {
        if self.standalone {
            let unused = "not used with `standalone: true` (leases come from this process)";
            if !self.allocators.is_empty() {
                return Err(invalid("allocators", self.allocators.join(","), unused));
            }
            if self.allocator_tls.is_some() {
                return Err(invalid("allocator_tls", "(set)", unused));
            }
            if self.insecure {
                return Err(invalid("insecure", true, unused));
            }
            return Ok(());
        }
        if let Some(p) = &self.ratelimit_config {
            return Err(invalid(
                "ratelimit_config",
                p.display(),
                "only with `standalone: true`: agents leasing from allocators receive                  envoyproxy/ratelimit rules from them, shared by every agent; apply the file                  there with `leasectl policy apply -f <file>`",
            ));
        }
        if self.allocators.is_empty() {
            return Err(invalid(
                "allocators",
                "[]",
                "at least one allocator address is required unless `standalone: true`",
            ));
        }
        if self.allocators.len() > ALLOCATORS_MAX {
            return Err(invalid(
                "allocators",
                format!("{} addresses", self.allocators.len()),
                format!("at most {ALLOCATORS_MAX}"),
            ));
        }
        for (i, a) in self.allocators.iter().enumerate() {
            allocator_addr(a)?;
            if self.allocators[..i].contains(a) {
                return Err(invalid("allocators", a, "listed twice"));
            }
        }
        match (&self.allocator_tls, self.insecure) {
            (None, false) => Err(invalid(
                "allocator_tls",
                "(none)",
                "required unless `insecure: true` (a cluster without TLS)",
            )),
            (Some(_), true) => Err(invalid(
                "insecure",
                true,
                "cannot be combined with allocator_tls",
            )),
            _ => Ok(()),
        }
    }

    /// Plaintext gRPC is the default only where no other host can connect.
    /// Both listeners serve mutual TLS with `listen_tls` (a Unix socket stays plaintext:
    /// file permissions decide who connects); without it, only local addresses are
    /// accepted unless `listen_insecure` says otherwise.
    fn check_listener(
        &self,
        field: &'static str,
        text: &str,
        addr: &ListenAddr,
    ) -> Result<(), ConfigError> {
        match (&self.listen_tls, self.listen_insecure) {
            (Some(_), true) => Err(invalid(
                "listen_insecure",
                true,
                "cannot be combined with listen_tls",
            )),
            (None, false) if !addr.is_local() => Err(invalid(
                field,
                text,
                "other hosts can connect to it: give listen_tls for mutual TLS, \
                 or `listen_insecure: true` to serve plaintext anyway",
            )),
            _ => Ok(()),
        }
    }
}

fn path(field: &'static str, p: &Path) -> Result<(), ConfigError> {
    let len = p.as_os_str().len();
    if len == 0 {
        return Err(invalid(field, "\"\"", "an empty path"));
    }
    if len > PATH_LEN_MAX {
        return Err(invalid(
            field,
            format!("{len} bytes"),
            format!("paths are at most {PATH_LEN_MAX} bytes"),
        ));
    }
    Ok(())
}

fn tls_paths(field: &'static str, files: &TlsFiles) -> Result<(), ConfigError> {
    // The nested field is named in full, e.g. `listen_tls.key`.
    let nested: [(&'static str, &Path); 3] = match field {
        "listen_tls" => [
            ("listen_tls.ca", &files.ca),
            ("listen_tls.cert", &files.cert),
            ("listen_tls.key", &files.key),
        ],
        _ => [
            ("allocator_tls.ca", &files.ca),
            ("allocator_tls.cert", &files.cert),
            ("allocator_tls.key", &files.key),
        ],
    };
    for (name, p) in nested {
        path(name, p)?;
    }
    Ok(())
}

/// `host:port` with a non-empty host and a port in 1..=65535.
fn allocator_addr(a: &str) -> Result<(), ConfigError> {
    let bad = |reason: &str| Err(invalid("allocators", a, reason));
    if a.len() > ADDRESS_LEN_MAX {
        return bad("longer than 255 bytes");
    }
    if a.contains("://") {
        return bad("give host:port without a scheme; TLS or not is set by allocator_tls");
    }
    let Some((host, port)) = a.rsplit_once(':') else {
        return bad("expected host:port");
    };
    if host.is_empty() || host.chars().any(char::is_whitespace) {
        return bad("expected host:port with a host name or IP address");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => bad("the port must be 1-65535"),
    }
}
