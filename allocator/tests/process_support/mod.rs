//! Running the allocator, agent and `leasectl` binaries for the end-to-end tests: free
//! loopback ports, child processes that never outlive a test, waiting for a condition, and
//! `leasectl` calls with an identity's certificates.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const ALLOCATOR: &str = env!("CARGO_BIN_EXE_leasehold-allocator");

// Shared with the simulations' process tests, which build the same binaries.
#[path = "../binary_support/mod.rs"]
mod binary_support;
pub use binary_support::workspace_binary;

/// The `leasectl` binary (package `leasehold-ctl`), built once per test process.
pub fn leasectl_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| workspace_binary("leasehold-ctl", "leasectl"))
}

/// The whole answer (status line, headers, body) to `GET path` on a plaintext HTTP
/// listener at `addr` (`host:port`).
pub fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The Prometheus page a node's HTTP listener at `http` (`host:port`) serves.
pub fn metrics_page(http: &str) -> String {
    http_get(http, "/metrics")
}

/// The value of the sample `name` (with its labels, as the page writes them), 0 when absent.
pub fn sample(page: &str, name: &str) -> u64 {
    let prefix = format!("{name} ");
    page.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process, killed and reaped when dropped, so a failing test leaves none behind.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` with its standard output discarded and its error output written to `log`.
pub fn spawn_logged(mut cmd: Command, log: &Path) -> Proc {
    let log = std::fs::File::create(log).unwrap();
    Proc(cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap())
}

/// Calls `attempt` every `every` until it answers `Ok`, and returns that answer; panics
/// with the latest refusal once `within` has passed.
pub fn wait_until<T>(
    within: Duration,
    every: Duration,
    mut attempt: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match attempt() {
            Ok(answer) => return answer,
            Err(why) => assert!(Instant::now() < deadline, "{why}"),
        }
        std::thread::sleep(every);
    }
}

/// `leasectl` against `server` over mutual TLS as `identity` (the stem of its certificate
/// files in `dir/certs`, e.g. `admin-ops`), with `dir` as its home.
pub fn leasectl(dir: &Path, server: &str, identity: &str, args: &[&str]) -> Command {
    let certs = dir.join("certs");
    let mut c = Command::new(leasectl_binary());
    c.env("HOME", dir)
        .args(["--server", server, "--server-name", "localhost"])
        .arg("--ca")
        .arg(certs.join("ca.pem"))
        .arg("--cert")
        .arg(certs.join(format!("{identity}.pem")))
        .arg("--key")
        .arg(certs.join(format!("{identity}-key.pem")))
        .args(args);
    c
}

/// The JSON a successful command printed.
pub fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "leasectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// The agent's flags serving its gateway listeners with mutual TLS as `agent/<name>`, its
/// files in `certs` as `leasectl certs init` writes them.
pub fn listen_tls_args(certs: &Path, name: &str) -> Vec<std::ffi::OsString> {
    let file = |f: String| certs.join(f).into_os_string();
    vec![
        "--tls-ca".into(),
        file("ca.pem".into()),
        "--tls-cert".into(),
        file(format!("agent-{name}.pem")),
        "--tls-key".into(),
        file(format!("agent-{name}-key.pem")),
    ]
}

/// The agent binary (package `leasehold-agent`).
pub fn agent_binary() -> PathBuf {
    workspace_binary("leasehold-agent", "leasehold-agent")
}

/// Waits for an agent's `/readyz` on `port` to answer 200: it has its policies from the
/// allocator (a gateway sends no traffic to an agent that is not ready).
pub fn wait_agent_ready(port: u16) {
    wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        let ready = std::net::TcpStream::connect(("127.0.0.1", port))
            .and_then(|mut s| {
                s.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
                let mut resp = String::new();
                s.read_to_string(&mut resp)?;
                Ok(resp.starts_with("HTTP/1.1 200"))
            })
            .unwrap_or(false);
        if ready {
            return Ok(());
        }
        Err(format!("agent on :{port} never became ready"))
    });
}

/// One `POST /v1/admit` of `policy` for `tenant` to the agent's HTTP port: whether it was
/// admitted, or None while the agent is not listening.
pub fn admit(port: u16, policy: &str, tenant: &str) -> Option<bool> {
    admit_answer(port, policy, tenant).map(|a| a["allowed"] == Value::Bool(true))
}

/// One `POST /v1/admit` of `policy` for `tenant`: the agent's JSON answer, or None while it
/// is not listening.
pub fn admit_answer(port: u16, policy: &str, tenant: &str) -> Option<Value> {
    let body =
        format!(r#"{{"dimensions":[{{"policy":"{policy}","entries":{{"tenant":"{tenant}"}}}}]}}"#);
    admit_body(port, &body)
}

/// One `POST /v1/admit` with the JSON `body`: the agent's JSON answer, or None while it is
/// not listening.
pub fn admit_body(port: u16, body: &str) -> Option<Value> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let req = format!(
        "POST /v1/admit HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (_, body) = resp.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// `leasectl -o json` against a node started with `--insecure`.
pub fn ctl_insecure(server: &str, args: &[&str]) -> Output {
    Command::new(leasectl_binary())
        .args(["--server", server, "--insecure", "-o", "json"])
        .args(args)
        .output()
        .unwrap()
}

/// The config of a one-node cluster without TLS on free loopback ports, its data under
/// `dir/node`; `raft` is the config's `raft:` mapping.
pub fn insecure_node_config(dir: &Path, raft: &str) -> (std::path::PathBuf, String) {
    let (grpc, http) = (free_port(), free_port());
    let config = dir.join("node.yaml");
    std::fs::write(
        &config,
        format!(
            "node_id: 1\ncluster: global\ngrpc_addr: 127.0.0.1:{grpc}\nhttp_addr: 127.0.0.1:{http}\n\
             advertise_addr: 127.0.0.1:{grpc}\ndata_dir: {d}\nsigning_key: {d}/lease-key.p8\ninsecure: true\n\
             raft: {raft}\nbootstrap:\n  - {{id: 1, addr: \"127.0.0.1:{grpc}\"}}\n",
            d = dir.join("node").display()
        ),
    )
    .unwrap();
    (config, format!("127.0.0.1:{grpc}"))
}

/// Starts the allocator binary on `config`, logging to `log`, and waits until it reports
/// itself healthy.
pub fn start_node(config: &Path, server: &str, log: &Path) -> Proc {
    let mut cmd = Command::new(ALLOCATOR);
    cmd.arg("-c").arg(config).arg("--insecure");
    let node = spawn_logged(cmd, log);
    wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        let out = ctl_insecure(server, &["status"]);
        if out.status.success() && json(&out)["healthy"] == Value::Bool(true) {
            return Ok(());
        }
        let log = std::fs::read_to_string(log).unwrap_or_default();
        Err(format!("allocator never became healthy; its log:\n{log}"))
    });
    node
}

/// A one-node cluster without TLS (fast elections), healthy: the process and its address.
pub fn start_insecure_allocator(dir: &Path) -> (Proc, String) {
    let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}";
    let (config, server) = insecure_node_config(dir, raft);
    let node = start_node(&config, &server, &dir.join("node.log"));
    (node, server)
}

/// The agent binary on free loopback ports, leasing from the insecure cluster at `server`
/// as `holder` (its log in `dir/<holder>.log`), ready: the process and its HTTP port.
pub fn start_insecure_agent(dir: &Path, server: &str, holder: &str) -> (Proc, u16) {
    start_insecure_agent_with(dir, server, holder, &[])
}

/// [`start_insecure_agent`] with `extra` arguments for the agent.
pub fn start_insecure_agent_with(
    dir: &Path,
    server: &str,
    holder: &str,
    extra: &[&str],
) -> (Proc, u16) {
    let (grpc, http) = (free_port(), free_port());
    let mut cmd = Command::new(agent_binary());
    cmd.args(["--allocator", server, "--insecure", "--holder-id", holder])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(extra);
    let proc = spawn_logged(cmd, &dir.join(format!("{holder}.log")));
    wait_agent_ready(http);
    (proc, http)
}

/// Sends `n` requests for `tenant` that the agent decides on the budget (an answer while
/// it still waits for its first lease decides nothing and is asked again); how many passed.
pub fn admitted(port: u16, policy: &str, tenant: &str, n: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..n {
        let answer =
            wait_until(
                Duration::from_secs(10),
                Duration::from_millis(20),
                || match admit_answer(port, policy, tenant) {
                    Some(a) if a["reason"] == "awaitinglease" => Err(format!("still waiting: {a}")),
                    Some(a) => Ok(a),
                    None => Err("no answer".to_owned()),
                },
            );
        if answer["allowed"] == true {
            admitted += 1;
        }
    }
    admitted
}
