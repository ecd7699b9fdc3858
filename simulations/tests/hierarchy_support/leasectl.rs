//! `leasectl` against the hierarchy's nodes, with an identity's certificates.

#[path = "../../../allocator/tests/binary_support/mod.rs"]
mod binary_support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `leasectl` binary, built once per test process.
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| binary_support::workspace_binary("leasehold-ctl", "leasectl"))
}

/// `leasectl` against `server` over mutual TLS as `identity` (the stem of its certificate
/// files in `dir/certs`, e.g. `admin-ops`), with `dir` as its home.
pub fn leasectl(dir: &Path, server: &str, identity: &str, args: &[&str]) -> Command {
    let certs = dir.join("certs");
    let mut c = Command::new(binary());
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
