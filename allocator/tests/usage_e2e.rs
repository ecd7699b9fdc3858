//! `leasectl usage` against what traffic really got: an allocator and two agents of the
//! release binaries on loopback, requests for one tenant through each agent, every answer
//! counted. Once the agents' reports are in, the usage the allocator recorded per holder is
//! exactly what each agent admitted and refused, for a token bucket over a time range and
//! for a calendar quota's current period; bad input is refused naming what is wrong.

mod process_support;

use process_support::{
    admit_answer, ctl_insecure, insecure_node_config, json, leasectl_binary, start_insecure_agent,
    start_node, wait_until,
};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const LIMIT: u64 = 10;
const PER_AGENT: u64 = 15;

const POLICIES: [(&str, &str); 2] = [
    ("tb", "rate: {units: 10, per: 1h}\nburst: 10\n"),
    ("cq", "algorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 10}\n"),
];

fn apply(dir: &Path, server: &str, id: &str, body: &str) {
    let file = dir.join(format!("{id}.yaml"));
    let doc = format!("id: {id}\ndimensions: [{{name: tenant}}]\nscope: global\n{body}");
    std::fs::write(&file, doc).unwrap();
    let out = ctl_insecure(server, &["policy", "apply", "-f", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the traffic generator saw from one agent: (admitted, refused) units. It sends
/// until `n` answers were decided on the budget; an answer while the agent still waits for
/// its first lease is a refusal too (the gateway turns the request away), and the request
/// is sent again.
fn drive(port: u16, policy: &str, n: u64) -> (u64, u64) {
    let (mut admitted, mut refused, mut decided) = (0, 0, 0);
    while decided < n {
        let a = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
            admit_answer(port, policy, "acme").ok_or_else(|| "no answer".to_owned())
        });
        if a["allowed"] == true {
            admitted += 1;
        } else {
            refused += 1;
        }
        if a["reason"] == "awaitinglease" {
            std::thread::sleep(Duration::from_millis(20));
        } else {
            decided += 1;
        }
    }
    (admitted, refused)
}

fn rfc3339(offset_secs: i64) -> String {
    let now = jiff::Timestamp::now();
    now.checked_add(jiff::SignedDuration::from_secs(offset_secs))
        .unwrap()
        .to_string()
}

fn usage(server: &str, args: &[&str]) -> Value {
    let mut all = vec!["usage", "--holder"];
    all.extend_from_slice(args);
    json(&ctl_insecure(server, &all))
}

/// `(admitted, refused)` per holder in a `usage --holder -o json` answer.
fn per_holder(v: &Value, holder: &str) -> (u64, u64) {
    v["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["holder"] == holder)
        .fold((0, 0), |(a, r), row| {
            let c = &row["counts"];
            (
                a + c["admitted"].as_u64().unwrap(),
                r + c["refused"].as_u64().unwrap(),
            )
        })
}

/// Whether the recorded usage of `holder` agrees with what its agent answered, `seen`:
/// exactly for an agent that held a lease (it admitted something), since its counts ride on
/// its reports; an agent that never got a lease has no lease to report refusals on, so
/// nothing of it may be recorded beyond what it answered.
fn agrees(v: &Value, holder: &str, seen: (u64, u64)) -> bool {
    let got = per_holder(v, holder);
    if seen.0 > 0 {
        got == seen
    } else {
        got.0 == 0 && got.1 <= seen.1
    }
}

/// Waits until the recorded usage agrees with what each agent answered (reports go every
/// half second while there is news).
fn settles_to(server: &str, args: &[&str], want: &[(&str, (u64, u64))]) -> Value {
    let mut last = Value::Null;
    let settled = (0..100).any(|_| {
        last = usage(server, args);
        let ok = want.iter().all(|(h, seen)| agrees(&last, h, *seen));
        if !ok {
            std::thread::sleep(Duration::from_millis(200));
        }
        ok
    });
    assert!(
        settled,
        "recorded usage {last} never matched the traffic {want:?}"
    );
    last
}

fn ctl_raw(server: &str, output: &str, args: &[&str]) -> Output {
    Command::new(leasectl_binary())
        .args(["--server", server, "--insecure", "-o", output])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn recorded_usage_matches_what_the_agents_answered() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Snapshots every 20 entries, so the restart below reads usage back from one.
    let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400, snapshot_every_entries: 20}";
    let (config, server) = insecure_node_config(dir, raft);
    let node = start_node(&config, &server, &dir.join("node.log"));
    for (id, body) in POLICIES {
        apply(dir, &server, id, body);
    }
    apply(
        dir,
        &server,
        "big",
        "rate: {units: 100, per: 1h}\nburst: 100\n",
    );
    let (agent_a, port_a) = start_insecure_agent(dir, &server, "gw-a");
    let (_b, port_b) = start_insecure_agent(dir, &server, "gw-b");
    let (since, until) = (rfc3339(-3_600), rfc3339(3_600));

    let mut seen = std::collections::BTreeMap::new();
    for (id, _) in POLICIES {
        let a = drive(port_a, id, PER_AGENT);
        let b = drive(port_b, id, PER_AGENT);
        assert!(a.0 + b.0 <= LIMIT, "{id}: admitted {a:?} + {b:?}");
        assert!(a.0 + b.0 > 0, "{id}: nothing admitted: {a:?} {b:?}");
        let range = ["--policy", id, "--since", &since, "--until", &until];
        let shown = settles_to(&server, &range, &[("gw-a", a), ("gw-b", b)]);
        eprintln!("{id}: gw-a {a:?}, gw-b {b:?}: {shown}");
        seen.insert(id, [("gw-a", a), ("gw-b", b)]);
        assert_eq!(shown["total"]["admitted"], a.0 + b.0, "{shown}");
        assert_eq!(shown["total"]["fail_open"], 0, "{shown}");
        assert_eq!(shown["precision"]["bucket_ms"], 3_600_000, "{shown}");
        assert_eq!(shown["precision"]["stranded_counted_as_spent"], true);
        assert!(shown["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["key"] == format!("{id}:tenant=acme")));
    }

    // The quota's current Berlin month holds what was just admitted.
    let period = usage(&server, &["--policy", "cq", "--period", "current"]);
    let month = (per_holder(&period, "gw-a").0, per_holder(&period, "gw-b").0);
    assert_eq!(
        month.0 + month.1,
        period["total"]["admitted"].as_u64().unwrap()
    );
    let quota = json(&ctl_insecure(&server, &["budget", "show", "cq"]));
    let used = quota["windows"][0]["used"].as_u64().unwrap();
    assert!(
        month.0 + month.1 <= used,
        "reported usage {month:?} is within what the quota consumed ({used}): {period}"
    );
    // One key: the same figures; another key: none.
    let acme = [
        "--policy",
        "cq",
        "--for-key",
        "cq:tenant=acme",
        "--period",
        "current",
    ];
    let acme = usage(&server, &acme);
    assert_eq!(
        acme["total"]["admitted"], period["total"]["admitted"],
        "{acme}"
    );
    let other = [
        "--policy",
        "cq",
        "--for-key",
        "cq:tenant=other",
        "--period",
        "current",
    ];
    let other = usage(&server, &other);
    assert_eq!(other["rows"], serde_json::json!([]), "{other}");
    assert_eq!(other["total"]["admitted"], 0, "{other}");
    let previous = usage(&server, &["--policy", "cq", "--period", "previous"]);
    assert_eq!(previous["total"]["admitted"], 0, "{previous}");
    assert!(previous["until_ms"].as_u64() <= period["since_ms"].as_u64());

    // CSV: a header and one row per holder, each with the figures' precision.
    let since_hour = usage(
        &server,
        &["--policy", "tb", "--since", &since, "--until", &until],
    )["since"]
        .as_str()
        .unwrap()
        .to_owned();
    let csv = ctl_raw(
        &server,
        "csv",
        &[
            "usage", "--policy", "tb", "--holder", "--since", &since, "--until", &until,
        ],
    );
    assert!(
        csv.status.success(),
        "{}",
        String::from_utf8_lossy(&csv.stderr)
    );
    let text = String::from_utf8(csv.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("policy,key,holder,since,until,admitted"),
        "{text}"
    );
    for (holder, (admitted, refused)) in seen["tb"] {
        if admitted > 0 {
            let row = format!("tb,tb:tenant=acme,{holder},{since_hour},");
            let line = lines.iter().find(|l| l.starts_with(&row)).expect(&text);
            let figures = format!(",{admitted},{refused},0,0,0,3600000,");
            assert!(line.contains(&figures), "{line} lacks {figures}");
        }
    }

    // The table states its precision.
    let table = ctl_raw(
        &server,
        "table",
        &[
            "usage", "--policy", "tb", "--since", &since, "--until", &until,
        ],
    );
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("TOTAL") && text.contains("Precision:"),
        "{text}"
    );

    // Bad input is refused, naming what is wrong.
    let backwards = ctl_raw(
        &server,
        "table",
        &[
            "usage", "--policy", "tb", "--since", &until, "--until", &since,
        ],
    );
    assert_eq!(backwards.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&backwards.stderr).contains("is not before --until"));
    let no_period = ctl_raw(
        &server,
        "table",
        &["usage", "--policy", "tb", "--period", "current"],
    );
    assert_eq!(no_period.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&no_period.stderr).contains("not a calendar_quota policy"));
    let unknown = ctl_raw(
        &server,
        "table",
        &["usage", "--policy", "nope", "--period", "current"],
    );
    assert_eq!(unknown.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("'nope'"));
    // CSV is for rows: another command is refused before anything is sent.
    let not_rows = ctl_raw(
        &server,
        "csv",
        &["emergency", "fail-open", "--policy", "tb"],
    );
    assert_eq!(not_rows.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&not_rows.stderr).contains("only `usage`"));
    let audit = json(&ctl_insecure(&server, &["audit", "tail"]));
    assert!(!audit.to_string().contains("emergency"), "{audit}");

    // An agent killed while it holds unspent credit never reports again: once its lease is
    // written off, what it had not reported spent shows as stranded.
    let big = drive(port_a, "big", 5);
    let big_range = ["--policy", "big", "--since", &since, "--until", &until];
    settles_to(&server, &big_range, &[("gw-a", big)]);
    drop(agent_a);
    let leases = json(&ctl_insecure(
        &server,
        &["lease", "ls", "--holder", "gw-a", "--policy", "big"],
    ));
    let lease = &leases.as_array().expect("a list of leases")[0];
    let unspent = lease["credit"].as_u64().unwrap() - lease["used"].as_u64().unwrap();
    assert!(unspent > 0, "{leases}");
    let stranded = wait_until(Duration::from_secs(40), Duration::from_millis(250), || {
        let v = usage(&server, &big_range);
        let s = v["rows"][0]["counts"]["stranded"].as_u64().unwrap_or(0);
        if s > 0 {
            Ok((s, v))
        } else {
            Err(format!("nothing stranded yet: {v}"))
        }
    });
    assert_eq!(stranded.0, unspent, "{leases} {}", stranded.1);
    assert_eq!(stranded.1["rows"][0]["counts"]["admitted"], big.0);

    // Killed and restarted from its data directory, the node still holds every figure.
    let range = ["--policy", "tb", "--since", &since, "--until", &until];
    let before = usage(&server, &range);
    drop(node);
    let _node = start_node(&config, &server, &dir.join("node-restarted.log"));
    let after = usage(&server, &range);
    // Both agents keep running, idle: what the one that held the lease reported stays as
    // it was, and nothing admitted was lost or added.
    assert_eq!(
        per_holder(&after, "gw-a"),
        per_holder(&before, "gw-a"),
        "{before} became {after}"
    );
    assert_eq!(
        after["total"]["admitted"], before["total"]["admitted"],
        "{after}"
    );
    assert!(before["total"]["admitted"].as_u64() > Some(0));
}
