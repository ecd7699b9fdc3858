//! Settings given on the command line, each replacing the config file's value.

use super::{AgentConfig, TlsFiles, UnknownPolicy};
use std::path::PathBuf;

/// Settings given as flags. Each `Some` (or non-empty list) replaces the file's value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--grpc-addr`.
    pub grpc_addr: Option<String>,
    /// `--http-addr`.
    pub http_addr: Option<String>,
    /// `--ratelimit-config`.
    pub ratelimit_config: Option<PathBuf>,
    /// `--policy`, repeated.
    pub policies: Vec<PathBuf>,
    /// `--standalone[=true|false]`.
    pub standalone: Option<bool>,
    /// `--allocator`, repeated.
    pub allocators: Vec<String>,
    /// `--holder-id`.
    pub holder_id: Option<String>,
    /// `--ca`, `--cert` and `--key` together.
    pub allocator_tls: Option<TlsFiles>,
    /// `--insecure[=true|false]`.
    pub insecure: Option<bool>,
    /// `--response-headers[=true|false]`.
    pub response_headers: Option<bool>,
    /// `--tls-ca`, `--tls-cert` and `--tls-key` together.
    pub listen_tls: Option<TlsFiles>,
    /// `--listen-insecure[=true|false]`.
    pub listen_insecure: Option<bool>,
    /// `--state-file`.
    pub state_file: Option<PathBuf>,
    /// `--allocator-key`, repeated.
    pub allocator_keys: Vec<String>,
    /// `--unknown-policy`.
    pub unknown_policy: Option<UnknownPolicy>,
    /// `--decide-timeout-ms`.
    pub decide_timeout_ms: Option<u64>,
    /// `--policy-stale-after-ms`.
    pub policy_stale_after_ms: Option<u64>,
    /// `--connections-max`.
    pub connections_max: Option<usize>,
    /// `--connections-per-peer-max`.
    pub connections_per_peer_max: Option<usize>,
    /// `--idle-timeout-ms`.
    pub idle_timeout_ms: Option<u64>,
    /// `--connection-age-max-ms`.
    pub connection_age_max_ms: Option<u64>,
    /// `--header-timeout-ms`.
    pub header_timeout_ms: Option<u64>,
    /// `--ratelimit-key-len-max`.
    pub ratelimit_key_len_max: Option<usize>,
    /// `--keys-max`.
    pub keys_max: Option<usize>,
    /// `--acquire-rate-max-per-s`.
    pub acquire_rate_max_per_s: Option<u64>,
    /// `--acquire-waiting-max`.
    pub acquire_waiting_max: Option<usize>,
    /// `--shaped-waiting-max`.
    pub shaped_waiting_max: Option<usize>,
    /// `--ratelimit-count-denied[=true|false]`.
    pub ratelimit_count_denied: Option<bool>,
    /// `--request-bytes-buffered-max`.
    pub request_bytes_buffered_max: Option<usize>,
    /// `--request-body-timeout-ms`.
    pub request_body_timeout_ms: Option<u64>,
}

impl AgentConfig {
    /// Replaces every setting the flags give.
    pub fn apply(&mut self, flags: Overrides) {
        fn set<T>(field: &mut T, flag: Option<T>) {
            if let Some(v) = flag {
                *field = v;
            }
        }
        fn set_list<T>(field: &mut Vec<T>, flag: Vec<T>) {
            if !flag.is_empty() {
                *field = flag;
            }
        }
        set(&mut self.grpc_addr, flags.grpc_addr);
        set(&mut self.http_addr, flags.http_addr);
        set(&mut self.ratelimit_config, flags.ratelimit_config.map(Some));
        set_list(&mut self.policies, flags.policies);
        set(&mut self.standalone, flags.standalone);
        set_list(&mut self.allocators, flags.allocators);
        set(&mut self.holder_id, flags.holder_id);
        set(&mut self.allocator_tls, flags.allocator_tls.map(Some));
        set(&mut self.insecure, flags.insecure);
        set(&mut self.response_headers, flags.response_headers);
        set(&mut self.listen_tls, flags.listen_tls.map(Some));
        set(&mut self.listen_insecure, flags.listen_insecure);
        set(&mut self.state_file, flags.state_file.map(Some));
        set_list(&mut self.allocator_keys, flags.allocator_keys);
        set(&mut self.unknown_policy, flags.unknown_policy);
        set(&mut self.decide_timeout_ms, flags.decide_timeout_ms);
        set(&mut self.policy_stale_after_ms, flags.policy_stale_after_ms);
        set(&mut self.ratelimit_key_len_max, flags.ratelimit_key_len_max);
        set(&mut self.keys_max, flags.keys_max);
        set(
            &mut self.acquire_rate_max_per_s,
            flags.acquire_rate_max_per_s,
        );
        set(&mut self.acquire_waiting_max, flags.acquire_waiting_max);
        set(&mut self.shaped_waiting_max, flags.shaped_waiting_max);
        set(
            &mut self.ratelimit_count_denied,
            flags.ratelimit_count_denied,
        );
        set(&mut self.connections_max, flags.connections_max.map(Some));
        set(
            &mut self.connections_per_peer_max,
            flags.connections_per_peer_max.map(Some),
        );
        set(&mut self.idle_timeout_ms, flags.idle_timeout_ms);
        set(&mut self.connection_age_max_ms, flags.connection_age_max_ms);
        set(&mut self.header_timeout_ms, flags.header_timeout_ms);
        set(
            &mut self.request_bytes_buffered_max,
            flags.request_bytes_buffered_max,
        );
        set(
            &mut self.request_body_timeout_ms,
            flags.request_body_timeout_ms,
        );
    }
}
