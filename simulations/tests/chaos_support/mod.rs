//! The binaries the chaos tests run, built into this test's target directory (they belong
//! to other packages, so cargo does not build them for this one).

use leasehold_simulations::chaos::procs::Binaries;
use std::path::Path;
use std::process::Command;

pub fn binaries() -> Binaries {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/<profile>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let target = profile_dir.parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "-q", "-p", "leasehold-allocator", "--bin"])
        .arg("leasehold-allocator")
        .args(["-p", "leasehold-agent", "--bin", "leasehold-agent"])
        .arg("--target-dir")
        .arg(target);
    if profile_dir.ends_with("release") {
        cargo.arg("--release");
    }
    let out = cargo.output().unwrap();
    assert!(
        out.status.success(),
        "building the binaries: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Binaries::in_dir(profile_dir).unwrap()
}
