//! The allocator's configuration: a YAML file, overridden by flags.
//!
//! One binary serves every level. A node whose config names `upstream` addresses is a
//! delegated (region or cell) allocator that leases its credit from them; a node without is
//! the root.

mod ledger;
pub use ledger::{LedgerSettings, LEDGER_BOUND_RANGE};

use leasehold_common::lease::LeaseVerifier;
use leasehold_common::read::read_text_capped;

/// Largest config file read, in bytes.
pub const CONFIG_FILE_LEN_MAX: u64 = 1024 * 1024;
use leasehold_common::ledger::{Level, UsageLimits};
use leasehold_proto::transport::{ListenerLimits, CONNECTIONS_MAX_LIMIT, IDLE_TIMEOUT_MS_DEFAULT};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config: {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// Paths of this node's mutual-TLS material.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A cluster member known at bootstrap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub id: u64,
    /// Address peers and clients use to reach it (`host:port`).
    pub addr: String,
}

/// Raft timing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTiming {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Build a snapshot after this many applied entries.
    pub snapshot_every_entries: u64,
}

/// Failover takes about `election_max_ms` plus up to `election_max_ms − election_min_ms`
/// plus a vote and a commit: openraft 0.9 lets a follower vote only once the leader's lease
/// (`election_max_ms`) has run out since it last heard from the leader, and the node starts
/// its own election a delay drawn afresh below that difference later (raft::campaign).
/// These defaults measured a median of about 0.35 s from SIGKILL of the leader to a
/// committed write (see docs/operations.md). The heartbeat is also openraft's deadline for
/// each append-entries call, so it cannot be much shorter.
impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_ms: 50,
            election_min_ms: 150,
            election_max_ms: 250,
            snapshot_every_entries: 20_000,
        }
    }
}

/// How much usage the replicated state keeps for `leasectl usage`. Part of the replicated
/// state from the cluster's first start: give every node the same values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageSettings {
    /// Hourly buckets older than this are dropped.
    pub retention_hours: u64,
    /// Most (hour, policy, key, holder) rows kept; units of rows past it are summed per
    /// policy and hour as overflow.
    pub rows_max: usize,
}

/// Longest usage retention a configuration may set: two years, in hours.
pub const USAGE_RETENTION_HOURS_MAX: u64 = 2 * 366 * 24;
/// Most usage rows a configuration may keep.
pub const USAGE_ROWS_MAX_LIMIT: usize = 10_000_000;

impl Default for UsageSettings {
    fn default() -> Self {
        let d = UsageLimits::default();
        UsageSettings {
            retention_hours: d.retention_hours,
            rows_max: d.rows_max,
        }
    }
}

impl UsageSettings {
    pub fn limits(&self) -> UsageLimits {
        UsageLimits {
            retention_hours: self.retention_hours,
            rows_max: self.rows_max,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=USAGE_RETENTION_HOURS_MAX).contains(&self.retention_hours) {
            return Err(invalid(
                "usage.retention_hours",
                format!(
                    "{}: must be 1 to {USAGE_RETENTION_HOURS_MAX}",
                    self.retention_hours
                ),
            ));
        }
        if !(1..=USAGE_ROWS_MAX_LIMIT).contains(&self.rows_max) {
            return Err(invalid(
                "usage.rows_max",
                format!("{}: must be 1 to {USAGE_ROWS_MAX_LIMIT}", self.rows_max),
            ));
        }
        Ok(())
    }
}

/// Bounds on the gRPC listener's connections (agents, peers, admins share it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerSettings {
    /// Connections open at once; more wait in the kernel's backlog. The process raises its
    /// open-file limit to fit them at start-up, or refuses to start. Unset: 10 000, lowered
    /// (with a warning) as far as the open-file hard limit requires.
    pub connections_max: Option<usize>,
    /// Connections one client certificate may keep open at once; more are closed once
    /// their handshake names the certificate. Holders act only as themselves, so each
    /// agent, region node and admin has its own and needs a few.
    pub connections_per_peer_max: usize,
    /// A connection silent (nothing read or written) this long is closed, in milliseconds.
    pub idle_timeout_ms: u64,
    /// Request bytes the lease and admin services buffer at once, across every call; a
    /// call whose next bytes do not fit is answered RESOURCE_EXHAUSTED.
    pub request_bytes_buffered_max: usize,
    /// A lease or admin request body not complete this long after its call began fails
    /// with DEADLINE_EXCEEDED, in milliseconds.
    pub request_body_timeout_ms: u64,
}

/// Default `listener.request_bytes_buffered_max`: 128 MiB.
pub const REQUEST_BYTES_BUFFERED_MAX_DEFAULT: usize = 128 << 20;
/// Least `listener.request_bytes_buffered_max`: a backup being restored (the largest admin
/// message) must fit in the part of the budget large calls may use (seven eighths).
pub const REQUEST_BYTES_BUFFERED_MIN: usize = 64 << 20;
/// Most `listener.request_bytes_buffered_max`: 16 GiB.
pub const REQUEST_BYTES_BUFFERED_LIMIT: usize = 16 << 30;
/// Default `listener.request_body_timeout_ms`: a restore of the largest backup at 2 MB/s.
pub const REQUEST_BODY_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Allowed `listener.request_body_timeout_ms`.
pub const REQUEST_BODY_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 1_000..=600_000;

/// Every agent of a region keeps one connection to a node, plus peers and admins.
pub const ALLOCATOR_CONNECTIONS_MAX_DEFAULT: usize = 10_000;
/// Default `listener.connections_per_peer_max`: far more than an agent (one or two), a
/// region node or a busy admin script opens, far fewer than the listener holds.
pub const CONNECTIONS_PER_PEER_MAX_DEFAULT: usize = 256;

impl Default for ListenerSettings {
    fn default() -> Self {
        ListenerSettings {
            connections_max: None,
            connections_per_peer_max: CONNECTIONS_PER_PEER_MAX_DEFAULT,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            request_bytes_buffered_max: REQUEST_BYTES_BUFFERED_MAX_DEFAULT,
            request_body_timeout_ms: REQUEST_BODY_TIMEOUT_MS_DEFAULT,
        }
    }
}

impl ListenerSettings {
    /// The bounds, with `connections_max` as fitted to the open-file limit.
    pub fn limits(&self, connections_max: usize) -> ListenerLimits {
        ListenerLimits {
            connections_max,
            idle_timeout_ms: self.idle_timeout_ms,
            connections_per_peer_max: Some(self.connections_per_peer_max),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(n) = self.connections_max {
            if !(1..=CONNECTIONS_MAX_LIMIT).contains(&n) {
                return Err(invalid(
                    "listener.connections_max",
                    format!("{n}: must be 1 to {CONNECTIONS_MAX_LIMIT}"),
                ));
            }
        }
        let per_peer = self.connections_per_peer_max;
        if !(1..=CONNECTIONS_MAX_LIMIT).contains(&per_peer) {
            return Err(invalid(
                "listener.connections_per_peer_max",
                format!("{per_peer}: must be 1 to {CONNECTIONS_MAX_LIMIT}"),
            ));
        }
        let buffered = self.request_bytes_buffered_max;
        if !(REQUEST_BYTES_BUFFERED_MIN..=REQUEST_BYTES_BUFFERED_LIMIT).contains(&buffered) {
            return Err(invalid(
                "listener.request_bytes_buffered_max",
                format!(
                    "{buffered}: must be {REQUEST_BYTES_BUFFERED_MIN} to {REQUEST_BYTES_BUFFERED_LIMIT} bytes"
                ),
            ));
        }
        if !REQUEST_BODY_TIMEOUT_MS_RANGE.contains(&self.request_body_timeout_ms) {
            return Err(invalid(
                "listener.request_body_timeout_ms",
                format!(
                    "{}: must be 1000 to 600000 milliseconds",
                    self.request_body_timeout_ms
                ),
            ));
        }
        // Raft heartbeats and watch keep-alives are far more frequent than a second.
        if !(1_000..=IDLE_TIMEOUT_MS_MAX).contains(&self.idle_timeout_ms) {
            return Err(invalid(
                "listener.idle_timeout_ms",
                format!(
                    "{}: must be 1000 to {IDLE_TIMEOUT_MS_MAX}",
                    self.idle_timeout_ms
                ),
            ));
        }
        Ok(())
    }
}

/// Longest idle timeout a configuration may set: a day, in milliseconds.
pub const IDLE_TIMEOUT_MS_MAX: u64 = 86_400_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocatorConfig {
    pub node_id: u64,
    /// Name of the cluster; it is the `grantor_id` in every lease this cluster signs.
    pub cluster: String,
    /// gRPC listener for Raft, lease and admin services.
    pub grpc_addr: SocketAddr,
    /// HTTP listener for `/metrics`, `/healthz` and `/readyz`.
    pub http_addr: SocketAddr,
    /// Address other nodes and clients use to reach `grpc_addr`.
    pub advertise_addr: String,
    pub data_dir: PathBuf,
    /// Members to bootstrap a new cluster with (this node included); empty to join one.
    #[serde(default)]
    pub bootstrap: Vec<Member>,
    /// Upstream allocator addresses; set for a region or cell allocator.
    #[serde(default)]
    pub upstream: Vec<String>,
    /// The hierarchy level this cluster serves: `global`, `region` or `cell`. Default:
    /// `global` for a root, `region` for a cluster with an upstream. A cluster owns the
    /// budget of every policy scoped at its level or below and sub-leases the rest.
    #[serde(default)]
    pub level: Option<String>,
    /// Mutual TLS; absent only with `insecure: true`.
    #[serde(default)]
    pub tls: Option<TlsFiles>,
    /// Plaintext without client authentication: local development only.
    #[serde(default)]
    pub insecure: bool,
    /// PKCS#8 Ed25519 key that signs this cluster's leases (created if missing).
    pub signing_key: PathBuf,
    /// Public keys (raw 32 bytes, hex) of upstream clusters whose leases this node accepts.
    #[serde(default)]
    pub trusted_upstream_keys: Vec<String>,
    #[serde(default)]
    pub raft: RaftTiming,
    /// How often the leader proposes expiry ticks.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    #[serde(default)]
    pub listener: ListenerSettings,
    #[serde(default)]
    pub usage: UsageSettings,
    #[serde(default)]
    pub ledger: LedgerSettings,
}

fn default_tick_ms() -> u64 {
    100
}

impl AllocatorConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text =
            read_text_capped(path, CONFIG_FILE_LEN_MAX).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        Self::from_yaml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let cfg: AllocatorConfig =
            serde_norway::from_str(text).map_err(|e| ConfigError::Parse {
                path: PathBuf::from("<inline>"),
                message: e.to_string(),
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// A root or delegated allocator.
    pub fn is_root(&self) -> bool {
        self.upstream.is_empty()
    }

    /// The level this cluster serves (validated by [`validate`](Self::validate)).
    pub fn level(&self) -> Level {
        match self.level.as_deref().and_then(Level::parse) {
            Some(level) => level,
            None if self.is_root() => Level::Global,
            None => Level::Region,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.node_id == 0 {
            return Err(invalid("node_id", "must be positive"));
        }
        let id_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !id_ok(&self.cluster) {
            return Err(invalid("cluster", "1-64 characters of [A-Za-z0-9_-]"));
        }
        if self.advertise_addr.is_empty() {
            return Err(invalid("advertise_addr", "must be set"));
        }
        match (&self.tls, self.insecure) {
            (None, false) => return Err(invalid("tls", "required unless `insecure: true` is set")),
            (Some(_), true) => return Err(invalid("insecure", "cannot be combined with tls")),
            _ => {}
        }
        if !self.bootstrap.is_empty() && !self.bootstrap.iter().any(|m| m.id == self.node_id) {
            return Err(invalid("bootstrap", "must include this node's own id"));
        }
        let mut ids: Vec<u64> = self.bootstrap.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(invalid("bootstrap", "member ids must be unique"));
        }
        let r = &self.raft;
        if r.heartbeat_ms == 0 || r.election_min_ms <= r.heartbeat_ms {
            return Err(invalid(
                "raft.election_min_ms",
                "must exceed heartbeat_ms, which must be positive",
            ));
        }
        if r.election_max_ms <= r.election_min_ms {
            return Err(invalid(
                "raft.election_max_ms",
                "must exceed election_min_ms",
            ));
        }
        self.listener.validate()?;
        self.usage.validate()?;
        self.ledger.validate()?;
        if self.tick_ms == 0 {
            return Err(invalid("tick_ms", "must be positive"));
        }
        if self.upstream.len() > UPSTREAM_ADDRS_MAX
            || self.upstream.iter().any(|a| a.trim().is_empty())
        {
            return Err(invalid(
                "upstream",
                format!("1-{UPSTREAM_ADDRS_MAX} non-empty `host:port` addresses"),
            ));
        }
        match self.level.as_deref().map(|l| (l, Level::parse(l))) {
            Some((text, None)) => {
                return Err(invalid(
                    "level",
                    format!("'{text}': expected global, region or cell"),
                ))
            }
            Some((_, Some(Level::Global))) if !self.is_root() => {
                return Err(invalid(
                    "level",
                    "global is the top level; a cluster with an upstream serves region or cell",
                ))
            }
            _ => {}
        }
        self.upstream_verifier().map(|_| ())
    }

    /// The keys upstream leases must be signed with; `None` when none are configured (the
    /// upstream is then trusted through its TLS certificate alone).
    pub fn upstream_verifier(&self) -> Result<Option<LeaseVerifier>, ConfigError> {
        if self.trusted_upstream_keys.is_empty() {
            return Ok(None);
        }
        let mut v = LeaseVerifier::new();
        for (i, text) in self.trusted_upstream_keys.iter().enumerate() {
            let bytes = hex::decode(text.trim()).map_err(|e| {
                invalid("trusted_upstream_keys", format!("entry {i}: not hex ({e})"))
            })?;
            v.trust(&bytes)
                .map_err(|e| invalid("trusted_upstream_keys", format!("entry {i}: {e}")))?;
        }
        Ok(Some(v))
    }
}

/// Upstream addresses a delegated node accepts.
pub const UPSTREAM_ADDRS_MAX: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "node_id: 1\ncluster: global\ngrpc_addr: 127.0.0.1:7400\nhttp_addr: 127.0.0.1:7480\nadvertise_addr: 127.0.0.1:7400\ndata_dir: /tmp/n1\nsigning_key: /tmp/n1/lease-key.p8\ninsecure: true\nbootstrap: [{id: 1, addr: \"127.0.0.1:7400\"}]\n";

    #[test]
    fn root_config_parses_with_defaults() {
        let c = AllocatorConfig::from_yaml(ROOT).unwrap();
        assert!(c.is_root());
        assert_eq!(c.raft, RaftTiming::default());
        assert_eq!(c.tick_ms, 100);
    }

    #[test]
    fn errors_name_the_field() {
        let typo = ROOT.replace("tick_ms", "tik_ms") + "tik_ms: 5\n";
        let e = AllocatorConfig::from_yaml(&typo).unwrap_err().to_string();
        assert!(e.contains("tik_ms"), "{e}");
        let no_tls = ROOT.replace("insecure: true\n", "");
        let e = AllocatorConfig::from_yaml(&no_tls).unwrap_err().to_string();
        assert!(e.contains("tls: required"), "{e}");
        let level = ROOT.to_owned() + "level: continent\n";
        let e = AllocatorConfig::from_yaml(&level).unwrap_err().to_string();
        assert!(e.contains("level: 'continent'"), "{e}");
        let delegated = ROOT.to_owned() + "upstream: [\"g:7400\"]\nlevel: global\n";
        let e = AllocatorConfig::from_yaml(&delegated)
            .unwrap_err()
            .to_string();
        assert!(e.contains("level: global is the top level"), "{e}");
        let cell = ROOT.to_owned() + "upstream: [\"g:7400\"]\nlevel: cell\n";
        assert_eq!(
            AllocatorConfig::from_yaml(&cell).unwrap().level(),
            Level::Cell
        );
        let stranger = ROOT.replace("{id: 1,", "{id: 2,");
        let e = AllocatorConfig::from_yaml(&stranger)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bootstrap"), "{e}");
        for (listener, field) in [
            ("{connections_max: 0}", "listener.connections_max"),
            (
                "{connections_per_peer_max: 0}",
                "listener.connections_per_peer_max",
            ),
            ("{idle_timeout_ms: 5}", "listener.idle_timeout_ms"),
        ] {
            let bad = format!("{ROOT}listener: {listener}\n");
            let e = AllocatorConfig::from_yaml(&bad).unwrap_err().to_string();
            assert!(e.contains(field), "{listener}: {e}");
        }
    }
}

#[cfg(test)]
mod deploy_examples {
    use super::*;

    /// The example configurations shipped in `deploy/config` stay valid.
    #[test]
    fn shipped_examples_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("deploy/config exists") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let cfg = AllocatorConfig::load(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(cfg.is_root(), cfg.upstream.is_empty());
                seen += 1;
            }
        }
        assert!(
            seen >= 4,
            "expected the root, region, cell and dev examples"
        );
    }
}
