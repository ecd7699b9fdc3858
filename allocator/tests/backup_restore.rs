//! Backup and restore on the release binaries: a root allocator serves an agent, `leasectl
//! backup` copies its state while credit is leased out, the node is lost, and a new node of
//! the same cluster is started from the file with `leasectl restore`, then killed and
//! started again from its snapshot. Policies and their
//! versions, calendar-quota usage and the audit trail come back; what was leased before the
//! backup is never granted again; a second restore is refused.

mod process_support;

use process_support::{
    admitted, ctl_insecure, insecure_node_config, json, start_insecure_agent as start_agent,
    start_insecure_allocator, start_node, wait_until,
};
use std::path::Path;
use std::time::Duration;

/// 10 units a month, decided by the allocator for every request.
const QUOTA: &str = "id: quota\ndimensions: [{name: tenant}]\nscope: global\n\
    enforcement: exact\nalgorithm: calendar_quota\n\
    calendar: {period: month, time_zone: Europe/Berlin, units: 10}\n";
/// 10 units an hour, leased to agents.
const WINDOW: &str = "id: window\ndimensions: [{name: tenant}]\nscope: global\n\
    algorithm: fixed_window\nrate: {units: 10, per: 1h}\n";

fn apply(dir: &Path, server: &str, name: &str, doc: &str) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, doc).unwrap();
    let out = ctl_insecure(server, &["policy", "apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_new_cluster_started_from_a_backup_keeps_policies_and_usage_and_never_mints_credit() {
    let old_dir = tempfile::tempdir().unwrap();
    let (old, server) = start_insecure_allocator(old_dir.path());
    apply(old_dir.path(), &server, "quota", QUOTA);
    apply(
        old_dir.path(),
        &server,
        "quota-v2",
        &format!("{QUOTA}description: v2\n"),
    );
    apply(old_dir.path(), &server, "window", WINDOW);
    let (agent, port) = start_agent(old_dir.path(), &server, "gw-1");
    assert_eq!(admitted(port, "quota", "acme", 3), 3);
    let window_before = admitted(port, "window", "acme", 4);
    assert_eq!(window_before, 4);

    let file = old_dir.path().join("global.backup");
    let out = ctl_insecure(&server, &["backup", "--out", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json(&out)["policies"], 2);
    drop(agent);
    drop(old);

    // The new node snapshots often, so the restored state is in a snapshot before it is
    // killed and started again below.
    let new_dir = tempfile::tempdir().unwrap();
    let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400, snapshot_every_entries: 20}";
    let (config, server) = insecure_node_config(new_dir.path(), raft);
    let log = new_dir.path().join("node.log");
    let new = start_node(&config, &server, &log);
    let restore = ["restore", "-f", file.to_str().unwrap(), "--reason", "drill"];
    let out = ctl_insecure(&server, &restore);
    assert!(out.status.success(), "{out:?}");
    let r = json(&out);
    assert_eq!(r["policies"], 2, "{r}");
    assert!(r["leases_written_off"].as_u64().unwrap() >= 1, "{r}");

    let out = ctl_insecure(&server, &["policy", "ls"]);
    let versions: Vec<(String, u64)> = json(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["policy_id"].as_str().unwrap().to_owned(),
                p["version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(versions.contains(&("quota".to_owned(), 2)), "{versions:?}");
    let audit = ctl_insecure(&server, &["audit", "tail", "-n", "10"]);
    let audit = String::from_utf8_lossy(&audit.stdout);
    assert!(
        audit.contains("cluster.restore") && audit.contains("policy.apply"),
        "{audit}"
    );

    // A new agent: the quota's usage came back, and the window's leased units stay spent.
    let (agent, port) = start_agent(new_dir.path(), &server, "gw-2");
    assert_eq!(
        admitted(port, "quota", "acme", 10),
        7,
        "the month had 7 units left"
    );
    let window_after = admitted(port, "window", "acme", 10);
    assert!(
        window_before + window_after <= 10,
        "{window_before} before the backup and {window_after} after it, of 10"
    );

    let again = ctl_insecure(&server, &restore);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("restore only into a new cluster"), "{err}");

    // Killed once a snapshot covers everything committed, the node starts from that
    // snapshot with the restored state: the quota stays spent, the policies stay.
    drop(agent);
    let status = |key: &str| {
        json(&ctl_insecure(&server, &["cluster", "status"]))[key]
            .as_u64()
            .unwrap()
    };
    let committed = status("committed_index");
    wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        let at = status("snapshot_index");
        (at >= committed)
            .then_some(())
            .ok_or(format!("snapshot at {at}, committed {committed}"))
    });
    drop(new);
    let _again = start_node(&config, &server, &log);
    let versions = json(&ctl_insecure(&server, &["policy", "ls"]));
    assert_eq!(versions.as_array().map(Vec::len), Some(2), "{versions}");
    let (_agent, port) = start_agent(new_dir.path(), &server, "gw-3");
    assert_eq!(
        admitted(port, "quota", "acme", 3),
        0,
        "the month's 10 units were spent"
    );
}
