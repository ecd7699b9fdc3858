//! Exact enforcement on the release binaries: an allocator and two agents on loopback.
//! Policies with `enforcement: exact` are decided per request by the allocator, so the two
//! agents together admit exactly the limit (no reserve held back, no credit left on a
//! lease); units admitted for a request that another dimension refuses are refunded; and
//! when the allocator is gone each policy's failure behaviour decides.

mod process_support;

use process_support::{
    admit_answer, admit_body, ctl_insecure, json, start_insecure_agent_with,
    start_insecure_allocator, wait_until, Proc,
};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const LIMIT: u64 = 10;
const PER_AGENT: u64 = 15;

/// Exact policies of each kind of supply, 10 units that do not come back within the test.
const POLICIES: [(&str, &str); 3] = [
    ("tb", "rate: {units: 10, per: 1h}\nburst: 10\n"),
    ("fw", "algorithm: fixed_window\nrate: {units: 10, per: 1h}\n"),
    ("cq", "algorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 10}\n"),
];

fn apply(dir: &Path, server: &str, id: &str, body: &str) -> Output {
    let file = dir.join(format!("{id}.yaml"));
    let doc = format!("id: {id}\ndimensions: [{{name: tenant}}]\n{body}");
    std::fs::write(&file, doc).unwrap();
    ctl_insecure(server, &["policy", "apply", "-f", file.to_str().unwrap()])
}

fn apply_ok(dir: &Path, server: &str, id: &str, body: &str) {
    let out = apply(dir, server, id, body);
    assert!(
        out.status.success(),
        "{id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start_agent(dir: &Path, server: &str, holder: &str) -> (Proc, u16) {
    start_insecure_agent_with(dir, server, holder, &["--decide-timeout-ms", "2000"])
}

/// The agent's answer once it has the policy (before, the id is unknown to it).
fn answer(port: u16, policy: &str, tenant: &str) -> serde_json::Value {
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || match admit_answer(port, policy, tenant) {
            Some(a) if a["reason"] == "unknownpolicy" => Err(format!("no policy yet: {a}")),
            Some(a) => Ok(a),
            None => Err("no answer".to_owned()),
        },
    )
}

fn admitted(port: u16, policy: &str, tenant: &str, n: u64) -> u64 {
    (0..n)
        .filter(|_| answer(port, policy, tenant)["allowed"] == true)
        .count() as u64
}

fn used(server: &str, policy: &str) -> u64 {
    let shown = json(&ctl_insecure(server, &["budget", "show", policy]));
    shown["windows"][0]["used"].as_u64().unwrap_or(0)
}

#[test]
fn two_agents_admit_exactly_the_limit_and_refund_what_another_dimension_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    for (id, body) in POLICIES {
        apply_ok(
            dir,
            &server,
            id,
            &format!("scope: global\nenforcement: exact\n{body}"),
        );
    }
    // One unit per agent and hour, enforced by each agent on its own.
    apply_ok(
        dir,
        &server,
        "local",
        "scope: process\nrate: {units: 1, per: 1h}\nburst: 1\n",
    );
    let (_a, port_a) = start_agent(dir, &server, "gw-a");
    let (_b, port_b) = start_agent(dir, &server, "gw-b");

    let mut report = Vec::new();
    for (id, _) in POLICIES {
        let together =
            admitted(port_a, id, "acme", PER_AGENT) + admitted(port_b, id, "acme", PER_AGENT);
        report.push(format!("{id}: {together}"));
        assert_eq!(
            together, LIMIT,
            "{id}: exact decisions admit the limit ({report:?})"
        );
    }
    let refused = answer(port_a, "fw", "acme");
    assert_eq!(refused["reason"], "overlimit", "{refused}");
    assert!(refused["retry_after_ms"].as_u64().unwrap() > 0, "{refused}");

    // A request spending an exact policy and a local one: the second such request is
    // refused by the local limit, and the exact unit it was admitted is given back.
    let both = r#"{"dimensions":[{"policy":"fw","entries":{"tenant":"beta"}},{"policy":"local","entries":{"tenant":"beta"}}]}"#;
    let first = admit_body(port_a, both).unwrap();
    assert_eq!(first["allowed"], true, "{first}");
    let second = admit_body(port_a, both).unwrap();
    assert_eq!(second["allowed"], false, "{second}");
    assert_eq!(
        second["results"][1]["outcome"], "denied(overlimit)",
        "{second}"
    );
    let beta_used = || {
        let shown = json(&ctl_insecure(&server, &["budget", "show", "fw"]));
        shown["windows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["key"] == "fw:tenant=beta")
            .and_then(|w| w["used"].as_u64())
    };
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || match beta_used() {
            Some(1) => Ok(()),
            other => Err(format!(
                "beta's exact usage is {other:?}, not 1 after the refund"
            )),
        },
    );
    assert_eq!(used(&server, "fw"), LIMIT, "acme's window is still spent");

    // The usage records hold what the decisions admitted, less what was refunded.
    let hour = jiff::SignedDuration::from_hours(1);
    let now = jiff::Timestamp::now();
    let (since, until) = (
        now.checked_sub(hour).unwrap().to_string(),
        now.checked_add(hour).unwrap().to_string(),
    );
    let usage = json(&ctl_insecure(
        &server,
        &[
            "usage", "--policy", "fw", "--since", &since, "--until", &until,
        ],
    ));
    let row = |key: &str| {
        usage["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .map(|r| r["counts"].clone())
            .unwrap_or_else(|| panic!("no row for {key}: {usage}"))
    };
    let (acme, beta) = (row("fw:tenant=acme"), row("fw:tenant=beta"));
    assert_eq!(acme["admitted"], LIMIT, "{usage}");
    assert!(acme["refused"].as_u64().unwrap() >= 1, "{usage}");
    assert_eq!(beta["admitted"], 1, "the refunded unit left: {usage}");
}

#[test]
fn without_the_allocator_each_exact_policy_fails_as_declared() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut node, server) = start_insecure_allocator(dir);
    let body = "scope: global\nenforcement: exact\nrate: {units: 100, per: 1s}\nburst: 100\n";
    apply_ok(
        dir,
        &server,
        "closed",
        &format!("{body}failure: {{mode: fail_closed}}\n"),
    );
    apply_ok(
        dir,
        &server,
        "open",
        &format!("{body}failure: {{mode: fail_open}}\n"),
    );
    let (_a, port) = start_agent(dir, &server, "gw-a");
    assert_eq!(answer(port, "closed", "t")["allowed"], true);
    assert_eq!(answer(port, "open", "t")["allowed"], true);

    let _ = node.0.kill();
    let _ = node.0.wait();
    let closed = answer(port, "closed", "t");
    assert_eq!(
        (closed["allowed"].clone(), closed["reason"].clone()),
        (serde_json::json!(false), serde_json::json!("unreachable")),
        "{closed}"
    );
    let open = answer(port, "open", "t");
    assert_eq!(open["allowed"], true, "{open}");
    assert_eq!(open["results"][0]["outcome"], "failopen", "{open}");
}

#[test]
fn exact_enforcement_needs_a_scope_beyond_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    let out = apply(
        dir,
        &server,
        "px",
        "scope: process\nenforcement: exact\nrate: {units: 1, per: 1s}\nburst: 1\n",
    );
    assert!(
        !out.status.success(),
        "accepted exact enforcement per process"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("enforcement"), "{err}");
}
