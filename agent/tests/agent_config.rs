//! The agent's configuration file: the shipped example, and the binary reading a file with
//! flags overriding it.

use leasehold_agent::config::{AgentConfig, Overrides};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

mod support;
use support::{agent, Running};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/agent/agent.yaml")
}

#[test]
fn the_shipped_example_parses_and_validates() {
    let c = AgentConfig::resolve(Some(&example()), Overrides::default()).unwrap();
    assert_eq!(c.holder_id, "gw-7");
    assert_eq!(c.allocators.len(), 3);
    assert!(!c.standalone && !c.insecure && !c.listen_insecure);
    assert!(c.allocator_tls.is_some());
    assert!(
        !c.grpc_listen().unwrap().is_local() && c.listen_tls.is_some(),
        "the example shows a listener for other hosts, behind mutual TLS"
    );
    // The sidecar variant it describes: loopback without TLS.
    let sidecar = AgentConfig::resolve(
        Some(&example()),
        Overrides {
            grpc_addr: Some("unix:/run/leasehold/agent-grpc.sock".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert!(sidecar.grpc_listen().unwrap().is_local());
}

fn wait_for(path: &Path) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn the_binary_reads_the_file_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let from_file = dir.path().join("file-grpc.sock");
    let from_flag = dir.path().join("flag-grpc.sock");
    let http = dir.path().join("http.sock");
    let cfg = dir.path().join("agent.yaml");
    std::fs::write(
        &cfg,
        format!(
            "standalone: true\ngrpc_addr: unix:{}\nhttp_addr: unix:{}\n",
            from_file.display(),
            http.display()
        ),
    )
    .unwrap();
    let flag = format!("unix:{}", from_flag.display());
    let child = agent(&["--config", cfg.to_str().unwrap(), "--grpc-addr", &flag])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _running = Running(child);
    assert!(wait_for(&http), "the file's HTTP address is served");
    assert!(wait_for(&from_flag), "the flag's gRPC address is served");
    assert!(
        !from_file.exists(),
        "the flag replaced the file's gRPC address"
    );
}

#[test]
fn the_binary_refuses_a_bad_file_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "standalone: true\nresponse_header: true\n",
            "response_header",
        ),
        ("standalone: true\nholder_id: \"gw 7\"\n", "holder_id"),
        ("allocators: [a:1]\n", "allocator_tls"),
    ];
    for (text, field) in cases {
        let cfg = dir.path().join("agent.yaml");
        std::fs::write(&cfg, text).unwrap();
        let out = agent(&["--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(stderr.contains(field), "{text}: {stderr}");
    }
    // A flag can turn off what the file turns on: refused as written, served with the flag.
    let cfg = dir.path().join("agent.yaml");
    let grpc = dir.path().join("g.sock");
    std::fs::write(
        &cfg,
        format!(
            "standalone: true\nallocators: [127.0.0.1:9]\ninsecure: true\n\
             grpc_addr: unix:{}\nhttp_addr: unix:{}\n",
            grpc.display(),
            dir.path().join("h.sock").display()
        ),
    )
    .unwrap();
    let out = agent(&["--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("standalone"),
        "{stderr}"
    );
    let child = agent(&["--config", cfg.to_str().unwrap(), "--standalone=false"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _running = Running(child);
    assert!(
        wait_for(&grpc),
        "started once the flag turned standalone off"
    );
}
