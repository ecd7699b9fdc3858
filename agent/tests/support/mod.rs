//! What the agent's process and TLS tests share: running the binary, free ports, the dev
//! PKI's files.

#![allow(dead_code)] // Each test binary uses a different part.

pub mod envoy;
pub mod rls;

use leasehold_agent::config::TlsFiles;
use leasehold_proto::transport::{
    cert_file_name, key_file_name, DevPki, PeerIdentity, PkiSpec, Role, CA_CERT_FILE,
};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

/// Kills the agent process when the test ends, even on a failed assertion.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Ends the process (SIGTERM, or SIGKILL with `kill -9`) and waits for it, polling so
/// that the test's runtime keeps running and its dropped connections close (the agent
/// drains open connections before it saves and exits).
pub async fn stop(mut running: Running, signal: &str) {
    let pid = running.0.id().to_string();
    let status = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while running.0.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not stop"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits out the end of the UNIX hour if it is less than `margin_s` seconds away, so that
/// a test's requests share one hour's windows.
pub async fn away_from_the_hour(margin_s: u64) {
    let s = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let left = 3_600 - s % 3_600;
    if left < margin_s {
        tokio::time::sleep(std::time::Duration::from_secs(left + 1)).await;
    }
}

/// The agent binary with `args`, without backtraces in its error output.
pub fn agent(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold-agent"));
    cmd.args(args).env("RUST_BACKTRACE", "0");
    cmd
}

/// A free loopback port: bound by the OS, released for the agent to take.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A dev PKI for agent `gw-1` and gateway `edge-proxy`, written to `dir`; returns it with
/// the agent's files.
pub fn agent_pki(dir: &Path) -> (DevPki, TlsFiles) {
    let pki = DevPki::generate(
        &PkiSpec::local(&[], &["gw-1", "edge-proxy"], &[]),
        SystemTime::now(),
    )
    .unwrap();
    pki.write_to(dir, false).unwrap();
    (pki, tls_files(dir, Role::Agent, "gw-1"))
}

/// Starts the agent binary with `args`, serving mutual TLS with `tls`, its output dropped.
pub fn spawn_with_tls(args: &[&str], tls: &TlsFiles) -> Running {
    let child = agent(args)
        .arg("--tls-ca")
        .arg(&tls.ca)
        .arg("--tls-cert")
        .arg(&tls.cert)
        .arg("--tls-key")
        .arg(&tls.key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Running(child)
}

/// The CA, certificate and key files of `role/name` in a dev PKI written to `dir`.
pub fn tls_files(dir: &Path, role: Role, name: &str) -> TlsFiles {
    let id = PeerIdentity::new(role, name).unwrap();
    TlsFiles {
        ca: dir.join(CA_CERT_FILE),
        cert: dir.join(cert_file_name(&id)),
        key: dir.join(key_file_name(&id)),
    }
}
