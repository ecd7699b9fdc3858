//! The allocator binary times its gRPC calls: after an admin call and an agent's lease
//! calls, `/metrics` counts them under `leasehold_rpc_duration_seconds` by method.

mod process_support;

use process_support::{
    admitted, ctl_insecure, insecure_node_config, metrics_page, sample, start_insecure_agent,
    start_node,
};

fn metrics(http: &str) -> String {
    metrics_page(http)
}

/// How many calls of `method` the page counts.
fn calls(page: &str, method: &str) -> u64 {
    sample(
        page,
        &format!("leasehold_rpc_duration_seconds_count{{method=\"{method}\"}}"),
    )
}

#[test]
fn lease_and_admin_calls_are_timed_by_method() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}";
    let (config, server) = insecure_node_config(dir, raft);
    let yaml = std::fs::read_to_string(&config).unwrap();
    let http = yaml
        .lines()
        .find_map(|l| l.strip_prefix("http_addr: "))
        .unwrap()
        .to_string();
    let _node = start_node(&config, &server, &dir.join("node.log"));
    let before = metrics(&http);

    let policy = dir.join("api.yaml");
    std::fs::write(
        &policy,
        "id: api\ndimensions: [{name: tenant}]\nscope: global\nrate: {units: 100, per: 1s}\nburst: 100\n",
    )
    .unwrap();
    let out = ctl_insecure(
        &server,
        &["policy", "apply", "-f", policy.to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    let (_agent, port) = start_insecure_agent(dir, &server, "gw-1");
    assert!(admitted(port, "api", "acme", 5) > 0);

    let after = metrics(&http);
    assert_eq!(calls(&before, "ApplyPolicy"), 0, "{before}");
    assert_eq!(calls(&after, "ApplyPolicy"), 1, "{after}");
    assert!(calls(&after, "Acquire") >= 1, "{after}");
    // The ledger's count of applied calls agrees with the RPCs (an agent calls alone).
    let applied = sample(&after, "leasehold_lease_calls_total{call=\"acquire\"}");
    assert_eq!(applied, calls(&after, "Acquire"), "{after}");
    assert_eq!(sample(&after, "leasehold_lease_calls_batched_total"), 0);
    // Every call is in the histogram's buckets too.
    assert!(
        after.contains("leasehold_rpc_duration_seconds_bucket{le=\"+Inf\",method=\"Acquire\"}"),
        "{after}"
    );
}
