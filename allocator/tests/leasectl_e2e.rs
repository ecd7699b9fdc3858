//! End to end from the binaries: `leasectl certs init`, a 3-node allocator cluster with
//! mutual TLS, and every `leasectl` command against it, JSON output included.

mod process_support;

use process_support::{
    free_port, json, leasectl, leasectl_binary, spawn_logged, wait_until, Proc, ALLOCATOR,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn config(dir: &Path, id: u64, ports: &[(u16, u16)]) -> PathBuf {
    let certs = dir.join("certs");
    let members: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (g, _))| format!("  - {{id: {}, addr: \"127.0.0.1:{g}\"}}", i + 1))
        .collect();
    let (grpc, http) = ports[(id - 1) as usize];
    let text = format!(
        "node_id: {id}\ncluster: global\ngrpc_addr: 127.0.0.1:{grpc}\nhttp_addr: 127.0.0.1:{http}\nadvertise_addr: 127.0.0.1:{grpc}\n\
         data_dir: {data}\nsigning_key: {data}/lease-key.p8\n\
         tls: {{ca: {c}/ca.pem, cert: {c}/allocator-global-{id}.pem, key: {c}/allocator-global-{id}-key.pem}}\n\
         raft: {{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400, snapshot_every_entries: 1000}}\nbootstrap:\n{}\n",
        members.join("\n"),
        data = dir.join(format!("node-{id}")).display(),
        c = certs.display(),
    );
    let path = dir.join(format!("node-{id}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn ctl(dir: &Path, server: &str, identity: &str, args: &[&str]) -> Output {
    leasectl(dir, server, identity, args).output().unwrap()
}

/// A running `audit tail --follow -o json`, its JSON lines, killed when dropped.
struct Follow {
    _child: Proc,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl Follow {
    fn start(dir: &Path, server: &str) -> Follow {
        let args = ["audit", "tail", "--follow", "-n", "1", "-o", "json"];
        let mut child = Proc(
            leasectl(dir, server, "admin-ops", &args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let stdout = child.0.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Follow {
            _child: child,
            lines,
        }
    }

    /// The next entry printed, waiting at most `secs`.
    fn next(&self, secs: u64) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(secs))
            .expect("audit tail --follow printed an entry in time")
    }
}

fn audit_len(dir: &Path, server: &str) -> usize {
    let out = ctl(
        dir,
        server,
        "admin-ops",
        &["audit", "tail", "-n", "10000", "-o", "json"],
    );
    json(&out).as_array().unwrap().len()
}

fn wait_ready(dir: &Path, server: &str) {
    wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let out = ctl(dir, server, "admin-ops", &["status", "-o", "json"]);
        if out.status.success() && json(&out)["healthy"] == Value::Bool(true) {
            return Ok(());
        }
        Err(format!(
            "cluster not healthy: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    });
}

#[test]
fn leasectl_administers_a_tls_cluster_from_the_binaries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let init = Command::new(leasectl_binary())
        .args(["certs", "init", "--out"])
        .arg(dir.join("certs"))
        .args([
            "--allocators",
            "global-1,global-2,global-3",
            "--agents",
            "gw-1",
            "--admins",
            "ops",
        ])
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let nodes: Vec<Proc> = (1..=3)
        .map(|id| {
            let mut node = Command::new(ALLOCATOR);
            node.arg("-c").arg(config(dir, id, &ports));
            spawn_logged(node, &dir.join(format!("node-{id}.log")))
        })
        .collect();
    let server = format!("127.0.0.1:{}", ports[2].0);
    wait_ready(dir, &server);
    let admin = |args: &[&str]| ctl(dir, &server, "admin-ops", args);

    let policy = dir.join("api.yaml");
    std::fs::write(&policy, "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100, per: 1s}\nburst: 200\n").unwrap();
    let applied = json(&admin(&[
        "policy",
        "apply",
        "-f",
        policy.to_str().unwrap(),
        "-o",
        "json",
    ]));
    assert_eq!(applied["version"], 1);
    let faster = dir.join("api-fast.yaml");
    std::fs::write(&faster, "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 300, per: 1s}\nburst: 600\n").unwrap();
    let diff = json(&admin(&[
        "policy",
        "diff",
        "api",
        "-f",
        faster.to_str().unwrap(),
        "-o",
        "json",
    ]));
    assert!(
        diff["diff"]
            .as_str()
            .unwrap()
            .contains("rate.units: 100 -> 300"),
        "{diff}"
    );
    assert_eq!(diff["affected_keys_total"], 0, "no holder has leased yet");
    let audited = audit_len(dir, &server);
    let dry = json(&admin(&[
        "policy",
        "apply",
        "-f",
        faster.to_str().unwrap(),
        "--dry-run",
        "-o",
        "json",
    ]));
    assert_eq!(
        (&dry["version"], &dry["dry_run"]),
        (&Value::from(2), &Value::Bool(true))
    );
    assert_eq!(
        json(&admin(&["policy", "ls", "-o", "json"]))[0]["version"],
        1,
        "a dry-run apply commits nothing"
    );
    assert_eq!(audit_len(dir, &server), audited, "nor audits anything");
    assert_eq!(
        json(&admin(&[
            "policy",
            "apply",
            "-f",
            faster.to_str().unwrap(),
            "-o",
            "json"
        ]))["version"],
        2
    );
    assert_eq!(
        json(&admin(&[
            "policy", "rollback", "api", "--to", "1", "-o", "json"
        ]))["version"],
        3
    );
    let listed = json(&admin(&["policy", "ls", "-o", "json"]));
    assert_eq!(listed[0]["policy_id"], "api");
    assert!(
        json(&admin(&["policy", "get", "api", "-o", "json"]))["yaml"]
            .as_str()
            .unwrap()
            .contains("units: 100")
    );

    let split = json(&admin(&[
        "budget", "split", "api", "--share", "eu=3", "--share", "us=1", "-o", "json",
    ]));
    assert_eq!(split["children"][0]["rate_per_sec"], 75.0);
    let shown = json(&admin(&["budget", "show", "api", "-o", "json"]));
    assert_eq!(shown["root"]["burst"], 200);
    let audited = audit_len(dir, &server);
    let preview = json(&admin(&[
        "budget",
        "set",
        "api",
        "--rate",
        "150",
        "--burst",
        "300",
        "--dry-run",
        "-o",
        "json",
    ]));
    assert_eq!(preview["dry_run"], true, "{preview}");
    assert_eq!(preview["changed"], true, "{preview}");
    assert_eq!(preview["policy_version"], 4, "the version it would create");
    assert_eq!(preview["old"]["rate_milli_per_sec"], 100_000, "{preview}");
    assert_eq!(preview["old"]["burst"], 200, "{preview}");
    assert_eq!(preview["new"]["rate_milli_per_sec"], 150_000, "{preview}");
    assert_eq!(preview["new"]["burst"], 300, "{preview}");
    let preview_diff = preview["diff"].as_str().unwrap();
    assert!(preview_diff.contains("burst: 200 -> 300"), "{preview}");
    let text = admin(&[
        "budget",
        "set",
        "api",
        "--rate",
        "150",
        "--burst",
        "300",
        "--dry-run",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("rate 100/s -> 150/s, burst 200 -> 300")
            && text.contains("would create version 4"),
        "{text}"
    );
    assert_eq!(
        json(&admin(&["policy", "get", "api", "-o", "json"]))["version"],
        3,
        "a dry-run budget set commits nothing"
    );
    assert_eq!(audit_len(dir, &server), audited, "nor audits anything");
    let set = json(&admin(&[
        "budget", "set", "api", "--rate", "150", "--burst", "300", "-o", "json",
    ]));
    assert_eq!(set["policy_version"], 4);
    assert_eq!(
        set["diff"], preview["diff"],
        "the preview showed the real change"
    );
    assert_eq!(audit_len(dir, &server), audited + 1);
    json(&admin(&["budget", "rebalance", "api", "-o", "json"]));
    assert_eq!(
        json(&admin(&["lease", "ls", "-o", "json"])),
        Value::Array(vec![])
    );
    let revoke = admin(&["lease", "revoke", "999"]);
    assert_eq!(revoke.status.code(), Some(3), "unknown lease is not found");

    let open = json(&admin(&[
        "emergency",
        "fail-open",
        "--policy",
        "api",
        "--reason",
        "drill",
        "-o",
        "json",
    ]));
    assert_eq!(open["after"], "EMERGENCY_MODE_FAIL_OPEN");
    json(&admin(&[
        "emergency",
        "restricted",
        "--policy",
        "api",
        "--min-priority",
        "5",
        "--rate",
        "10",
        "-o",
        "json",
    ]));
    json(&admin(&[
        "emergency",
        "normal",
        "--policy",
        "api",
        "-o",
        "json",
    ]));

    // A followed tail prints the newest entry, then each new one as it is committed.
    let follow = Follow::start(dir, &server);
    let newest = follow.next(10);
    assert_eq!(newest["action"], "emergency.set", "{newest}");
    json(&admin(&[
        "emergency",
        "fail-open",
        "--policy",
        "api",
        "--reason",
        "follow-check",
        "-o",
        "json",
    ]));
    let arrived = follow.next(10);
    assert_eq!(arrived["reason"], "follow-check", "{arrived}");
    assert_eq!(arrived["actor"], "admin/ops", "{arrived}");
    assert!(
        arrived["seq"].as_u64() > newest["seq"].as_u64(),
        "{newest} then {arrived}"
    );
    drop(follow);
    json(&admin(&[
        "emergency",
        "normal",
        "--policy",
        "api",
        "-o",
        "json",
    ]));

    // Asked of any node, the status comes from the leader, which sees replication.
    let status = json(&admin(&["cluster", "status", "-o", "json"]));
    assert_eq!(status["members"].as_array().unwrap().len(), 3);
    assert_eq!(status["node_id"], status["leader_id"], "{status}");
    for m in status["members"].as_array().unwrap() {
        assert_eq!(m["healthy"], true, "{status}");
        assert!(m["matched_index"].as_u64() > Some(0), "{status}");
    }
    let audit = json(&admin(&["audit", "tail", "-n", "50", "-o", "json"]));
    let entries = audit.as_array().unwrap();
    assert!(entries.len() >= 8, "{audit}");
    assert!(entries.iter().all(|e| e["actor"] == "admin/ops"), "{audit}");
    assert!(entries
        .iter()
        .any(|e| e["action"] == "emergency.set" && e["reason"] == "drill"));

    let as_agent = ctl(dir, &server, "agent-gw-1", &["policy", "ls"]);
    assert_eq!(
        as_agent.status.code(),
        Some(4),
        "agent certificate refused: {}",
        String::from_utf8_lossy(&as_agent.stderr)
    );
    let bad = admin(&[
        "policy",
        "apply",
        "-f",
        dir.join("missing.yaml").to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(6));
    exit_codes_name_what_failed(dir, &server);
    drop(nodes);
}

/// A hostile value is refused by name without echoing all of it, and a connection the
/// server's TLS refuses exits as unreachable.
fn exit_codes_name_what_failed(dir: &Path, server: &str) {
    let long_id = "x".repeat(20_000);
    let out = ctl(dir, server, "admin-ops", &["policy", "get", &long_id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.len() < 4_096, "{} bytes of error", err.len());

    let other = dir.join("other");
    let init = Command::new(leasectl_binary())
        .args(["certs", "init", "--out"])
        .arg(&other)
        .args(["--admins", "ops"])
        .output()
        .unwrap();
    assert!(init.status.success());
    let mut stranger = Command::new(leasectl_binary());
    stranger
        .env("HOME", dir)
        .args(["--server", server, "--server-name", "localhost", "--ca"])
        .arg(other.join("ca.pem"))
        .arg("--cert")
        .arg(other.join("admin-ops.pem"))
        .arg("--key")
        .arg(other.join("admin-ops-key.pem"))
        .args(["policy", "ls"]);
    let out = stranger.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "another CA: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plaintext = Command::new(leasectl_binary())
        .env("HOME", dir)
        .args(["--server", server, "--insecure", "policy", "ls"])
        .output()
        .unwrap();
    assert_eq!(
        plaintext.status.code(),
        Some(5),
        "plaintext against TLS: {}",
        String::from_utf8_lossy(&plaintext.stderr)
    );
}
