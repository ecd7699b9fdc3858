//! A node of the release binary restarts from its own snapshot, after `kill -9` and after
//! SIGTERM alike, with everything operators see unchanged: policies of every kind with their
//! versions, budgets and splits, calendar quotas, emergency switches, the audit trail and a
//! live lease of a killed agent.

mod process_support;

use process_support::{
    admit, agent_binary, ctl_insecure, free_port, insecure_node_config, json, spawn_logged,
    start_node, wait_agent_ready, wait_until, Proc,
};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Every algorithm, with optional parts set, and an exact quota; `tb`'s lease outlives the
/// test.
const DOCS: [(&str, &str); 7] = [
    ("tb", "id: tb\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 50, per: 1s}\nburst: 100\nlease: {ttl: 60s, refresh_horizon: 500ms, reserve_fraction: \"5%\"}\n"),
    ("gcra", "id: gcra\nalgorithm: gcra\nrate: {units: 20, per: 1s}\nburst: 4\nfailure: {mode: fail_closed}\n"),
    ("fw", "id: fw\nalgorithm: fixed_window\nrate: {units: 10, per: 1h}\ndescription: \"hourly: \\\"quoted\\\" ü\"\n"),
    ("sw", "id: sw\nalgorithm: sliding_window\nrate: {units: 10, per: 1m}\n"),
    ("cq", "id: cq\nalgorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 1000}\n"),
    ("cc", "id: cc\nalgorithm: concurrency\nconcurrency: {max_in_flight: 2}\nscope: process\n"),
    ("ex", "id: ex\ndimensions: [{name: tenant}]\nenforcement: exact\nalgorithm: fixed_window\nrate: {units: 10, per: 1h}\n"),
];

struct Node {
    dir: std::path::PathBuf,
    config: std::path::PathBuf,
    server: String,
    runs: u32,
}

impl Node {
    fn new(dir: &Path) -> Node {
        // A snapshot every 20 entries: the 100 ms ticks alone take one every two seconds.
        let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400, snapshot_every_entries: 20}";
        let (config, server) = insecure_node_config(dir, raft);
        Node {
            dir: dir.to_owned(),
            config,
            server,
            runs: 0,
        }
    }

    fn start(&mut self) -> Proc {
        self.runs += 1;
        let log = self.dir.join(format!("node-run{}.log", self.runs));
        start_node(&self.config, &self.server, &log)
    }

    fn ctl(&self, args: &[&str]) -> Output {
        ctl_insecure(&self.server, args)
    }

    fn ok(&self, args: &[&str]) -> Value {
        json(&self.ctl(args))
    }

    fn apply(&self, yaml: &str, extra: &[&str]) {
        let file = self.dir.join("doc.yaml");
        std::fs::write(&file, yaml).unwrap();
        let mut args = vec!["policy", "apply", "-f", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.ok(&args);
    }

    /// What operators can read of the state, without figures that move with time alone.
    fn view(&self) -> Value {
        let policies = self.ok(&["policy", "ls"]);
        let mut versions = Vec::new();
        let mut budgets = Vec::new();
        for p in policies.as_array().unwrap() {
            let id = p["policy_id"].as_str().unwrap();
            for v in 1..=p["version"].as_u64().unwrap() {
                versions.push(self.ok(&["policy", "get", id, "--version", &v.to_string()]));
            }
            // Policies that are not leased have no budget; the refusal is part of the view.
            let out = self.ctl(&["budget", "show", id]);
            let printed = if out.status.success() {
                &out.stdout
            } else {
                &out.stderr
            };
            let mut budget: Value = serde_json::from_slice(printed).unwrap();
            if out.status.success() {
                budget.as_object_mut().unwrap().remove("window_ms");
                budget["root"]
                    .as_object_mut()
                    .unwrap()
                    .remove("utilisation");
            }
            budgets.push(budget);
        }
        json!({
            "policies": policies,
            "versions": versions,
            "budgets": budgets,
            "leases": self.ok(&["lease", "ls"]),
            "audit": self.ok(&["audit", "tail", "-n", "10000"]),
        })
    }

    /// Waits until the node's newest snapshot covers every entry committed so far.
    fn wait_snapshot(&self) -> u64 {
        let committed = self.ok(&["cluster", "status"])["committed_index"]
            .as_u64()
            .unwrap();
        wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            let at = self.ok(&["cluster", "status"])["snapshot_index"]
                .as_u64()
                .unwrap();
            if at >= committed {
                return Ok(at);
            }
            Err(format!("snapshot at {at}, committed {committed}"))
        })
    }
}

fn sigterm(proc: &mut Proc) {
    let pid = proc.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = wait_until(Duration::from_secs(15), Duration::from_millis(20), || {
        proc.0
            .try_wait()
            .unwrap()
            .ok_or_else(|| "allocator did not exit on SIGTERM".to_owned())
    });
    assert!(status.success(), "graceful exit: {status:?}");
}

/// Builds a state with every kind of content; returns the killed agent's lease ids.
fn populate(node: &Node) -> Vec<u64> {
    for (_, doc) in DOCS {
        node.apply(doc, &[]);
    }
    node.apply(&DOCS[3].1.replace("units: 10", "units: 12"), &["--shadow"]);
    node.apply(&DOCS[1].1.replace("burst: 4", "burst: 8"), &[]);
    node.ok(&["policy", "rollback", "gcra", "--to", "1"]);
    node.ok(&["budget", "set", "tb", "--rate", "60", "--burst", "120"]);
    node.ok(&[
        "budget", "split", "tb", "--share", "eu=3", "--share", "us=1",
    ]);
    node.ok(&[
        "emergency",
        "fail-open",
        "--policy",
        "gcra",
        "--reason",
        "drill",
    ]);
    let restricted = [
        "emergency",
        "restricted",
        "--policy",
        "fw",
        "--min-priority",
        "2",
        "--rate",
        "5",
    ];
    node.ok(&restricted);

    // A live lease: an agent spends some of it and is killed, so it stays out unchanged.
    let (grpc, http) = (free_port(), free_port());
    let mut agent = Command::new(agent_binary());
    agent
        .args([
            "--allocator",
            &node.server,
            "--insecure",
            "--holder-id",
            "gw-1",
        ])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")]);
    let mut agent = spawn_logged(agent, &node.dir.join("agent.log"));
    wait_agent_ready(http);
    // The first requests wait for the lease the agent asks for on seeing them.
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || match admit(http, "tb", "acme") {
            Some(true) => Ok(()),
            other => Err(format!("the agent admitted nothing: {other:?}")),
        },
    );
    let leases = wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let ids: Vec<u64> = node
            .ok(&["lease", "ls"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["used"].as_u64() > Some(0))
            .map(|l| l["lease_id"].as_u64().unwrap())
            .collect();
        if ids.is_empty() {
            return Err("no lease with reported usage yet".to_owned());
        }
        Ok(ids)
    });
    // Three units of the exact quota, counted by the node itself.
    for _ in 0..3 {
        assert_eq!(admit(http, "ex", "acme"), Some(true));
    }
    agent.0.kill().unwrap();
    agent.0.wait().unwrap();
    leases
}

#[test]
fn a_node_restarts_from_its_snapshot_after_kill_and_after_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let mut node = Node::new(tmp.path());
    let mut proc = node.start();
    let leases = populate(&node);
    let before = node.view();
    assert_eq!(before["policies"].as_array().unwrap().len(), DOCS.len());
    let exact = before["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["windows"][0]["key"] == "ex:tenant=acme")
        .expect("the exact quota's budget");
    assert_eq!(exact["windows"][0]["used"], 3, "{exact}");
    let snapshot = node.wait_snapshot();

    proc.0.kill().unwrap(); // SIGKILL: nothing is flushed on the way out
    proc.0.wait().unwrap();
    let mut proc = node.start();
    let after_kill = node.view();
    assert_eq!(after_kill, before, "state after kill -9 and restart");
    assert!(node.ok(&["cluster", "status"])["snapshot_index"].as_u64() >= Some(snapshot));
    let live: Vec<u64> = after_kill["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lease_id"].as_u64().unwrap())
        .collect();
    assert!(
        leases.iter().all(|l| live.contains(l)),
        "{leases:?} in {live:?}"
    );

    node.wait_snapshot();
    sigterm(&mut proc);
    let _proc = node.start();
    assert_eq!(node.view(), before, "state after SIGTERM and restart");

    // The restored node goes on changing state.
    node.apply(&DOCS[4].1.replace("units: 1000", "units: 2000"), &[]);
    assert_eq!(node.ok(&["policy", "get", "cq"])["version"], 2);
}
