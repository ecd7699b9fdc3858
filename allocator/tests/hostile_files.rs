//! A path that never ends (`/dev/zero`) given where a file is read is refused at its size
//! bound, naming it, instead of filling memory: the allocator's config, a policy file for
//! `leasectl policy apply -f`, and the agent's policy and envoyproxy/ratelimit files.

mod process_support;

use process_support::{agent_binary, leasectl_binary, wait_until, Proc, ALLOCATOR};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `cmd` to its end (killed after 30 s) and returns its exit success and error output.
fn run(mut cmd: Command) -> (bool, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Proc(
        cmd.stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap(),
    );
    let status = wait_until(Duration::from_secs(30), Duration::from_millis(20), || {
        child
            .0
            .try_wait()
            .unwrap()
            .ok_or_else(|| "still running".to_owned())
    });
    (
        status.success(),
        std::fs::read_to_string(log.path()).unwrap(),
    )
}

#[test]
fn endless_files_are_refused_at_their_bound() {
    let mut allocator = Command::new(ALLOCATOR);
    allocator.args(["-c", "/dev/zero"]);
    let mut apply = Command::new(leasectl_binary());
    apply.args([
        "--server",
        "127.0.0.1:1",
        "--insecure",
        "policy",
        "apply",
        "-f",
        "/dev/zero",
    ]);
    let agent = agent_binary();
    let mut policy = Command::new(&agent);
    policy.args(["--standalone", "--policy", "/dev/zero"]);
    let mut ratelimit = Command::new(&agent);
    ratelimit.args(["--standalone", "--ratelimit-config", "/dev/zero"]);
    for (name, cmd) in [
        ("allocator -c", allocator),
        ("leasectl policy apply -f", apply),
        ("agent --policy", policy),
        ("agent --ratelimit-config", ratelimit),
    ] {
        let (ok, err) = run(cmd);
        assert!(!ok, "{name}: accepted /dev/zero");
        assert!(err.contains("larger than"), "{name}: {err}");
    }
}

/// The data directory holds the replicated state and the signing key: its owner alone
/// reads it.
#[test]
fn the_data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let (_node, _server) = process_support::start_insecure_allocator(tmp.path());
    let mode = std::fs::metadata(tmp.path().join("node"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "mode {mode:o}");
}
