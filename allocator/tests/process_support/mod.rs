//! Running the allocator, agent and `leasectl` binaries for the end-to-end tests: free
//! loopback ports, child processes that never outlive a test, waiting for a condition, and
//! `leasectl` calls with an identity's certificates.

#![allow(dead_code)]

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const LEASECTL: &str = env!("CARGO_BIN_EXE_leasectl");
pub const ALLOCATOR: &str = env!("CARGO_BIN_EXE_leasehold-allocator");

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
    let mut c = Command::new(LEASECTL);
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
