//! Binaries of other packages of the workspace, built into this test's target directory with
//! its profile: cargo builds only a package's own binaries for its tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds binary `bin` of package `package`; returns its path.
pub fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    let dir = profile_dir();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "-q", "-p", package, "--bin", bin])
        .arg("--target-dir")
        .arg(dir.parent().unwrap());
    // `debug` is the dev profile's directory; every other profile's is named after it.
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some(profile) => {
            cargo.args(["--profile", profile]);
        }
    }
    let out = cargo.output().unwrap();
    assert!(
        out.status.success(),
        "building {bin} of {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(bin)
}

/// The directory of this test's profile, where cargo puts every binary it builds with it.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/<profile>
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}
