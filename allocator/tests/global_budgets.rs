//! One budget for the fleet, whatever the algorithm: an allocator and two agents of the
//! release binaries on loopback, each policy limited to 10 units that cannot come back
//! during the test, 15 decided requests per agent for one tenant. Together the agents admit
//! at most the limit, and at least 80 % of it (the rest is the emergency reserve or credit
//! still on the other agent's lease). A concurrency limit beyond one process is refused at
//! apply time, naming the field.

mod process_support;

use process_support::{
    admitted, ctl_insecure, json, start_insecure_agent, start_insecure_allocator,
};
use std::path::Path;
use std::process::Output;

const LIMIT: u64 = 10;
const PER_AGENT: u64 = 15;

/// Each algorithm at scope global, 10 units that do not refill within the test.
const POLICIES: [(&str, &str); 5] = [
    ("tb", "rate: {units: 10, per: 1h}\nburst: 10\n"),
    ("gcra", "algorithm: gcra\nrate: {units: 10, per: 1h}\nburst: 10\n"),
    ("fw", "algorithm: fixed_window\nrate: {units: 10, per: 1h}\n"),
    ("sw", "algorithm: sliding_window\nrate: {units: 10, per: 1h}\n"),
    ("cq", "algorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 10}\n"),
];

fn apply(dir: &Path, server: &str, id: &str, scope: &str, body: &str) -> Output {
    let file = dir.join(format!("{id}.yaml"));
    let doc = format!("id: {id}\ndimensions: [{{name: tenant}}]\nscope: {scope}\n{body}");
    std::fs::write(&file, doc).unwrap();
    ctl_insecure(server, &["policy", "apply", "-f", file.to_str().unwrap()])
}

#[test]
fn two_agents_share_one_budget_for_every_algorithm() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    for (id, body) in POLICIES {
        let out = apply(dir, &server, id, "global", body);
        assert!(
            out.status.success(),
            "{id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (_a, port_a) = start_insecure_agent(dir, &server, "gw-a");
    let (_b, port_b) = start_insecure_agent(dir, &server, "gw-b");
    let mut report = Vec::new();
    for (id, _) in POLICIES {
        let together =
            admitted(port_a, id, "acme", PER_AGENT) + admitted(port_b, id, "acme", PER_AGENT);
        report.push(format!("{id}: {together}"));
        assert!(
            together <= LIMIT,
            "{id}: the two agents admitted {together} > {LIMIT} ({report:?})"
        );
        assert!(
            together * 10 >= LIMIT * 8,
            "{id}: the two agents admitted only {together} of {LIMIT} ({report:?})"
        );
    }
    eprintln!("admitted by both agents together: {report:?}");

    // The quota's period is the Berlin calendar month, with its used and remaining units.
    let shown = json(&ctl_insecure(&server, &["budget", "show", "cq"]));
    let w = &shown["windows"][0];
    assert_eq!(w["key"], "cq:tenant=acme", "{shown}");
    let (used, remaining) = (
        w["used"].as_u64().unwrap(),
        w["remaining"].as_u64().unwrap(),
    );
    assert_eq!(
        (w["limit"].as_u64(), used + remaining),
        (Some(LIMIT), LIMIT),
        "{shown}"
    );
    assert!(used * 10 >= LIMIT * 8, "{shown}");
    let berlin = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
    let local = |ms: &serde_json::Value| {
        let t = jiff::Timestamp::from_millisecond(ms.as_i64().unwrap()).unwrap();
        berlin.to_datetime(t)
    };
    let (start, end) = (local(&w["start_ms"]), local(&w["end_ms"]));
    assert_eq!(
        (start.day(), start.hour(), start.minute()),
        (1, 0, 0),
        "{shown}"
    );
    assert_eq!((end.day(), end.hour()), (1, 0), "{shown}");
    assert_eq!(
        start.date().last_of_month().tomorrow().unwrap(),
        end.date(),
        "{shown}"
    );
}

#[test]
fn a_concurrency_limit_beyond_one_process_is_refused_naming_the_scope() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    let body = "algorithm: concurrency\nconcurrency: {max_in_flight: 2}\n";
    let out = apply(dir, &server, "cc", "global", body);
    assert!(
        !out.status.success(),
        "accepted a fleet-wide concurrency limit"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("scope: scope global cannot be honoured"),
        "{err}"
    );
    assert!(err.contains("set scope: process"), "{err}");
    // The same limit per process is accepted.
    let ok = apply(dir, &server, "cc", "process", body);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
