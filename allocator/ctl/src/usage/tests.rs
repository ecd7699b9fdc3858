use super::*;

fn args(since: Option<&str>, until: Option<&str>, period: Option<PeriodArg>) -> UsageArgs {
    UsageArgs {
        policy: "cq".into(),
        for_key: None,
        holder: false,
        since: since.map(str::to_owned),
        until: until.map(str::to_owned),
        period,
        limit: 0,
    }
}

fn input_error(a: &UsageArgs) -> String {
    match request(a) {
        Err(CtlError::Input(m)) => m,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn a_range_ending_before_it_starts_is_refused_naming_both_ends() {
    let a = args(
        Some("2026-12-02T00:00:00Z"),
        Some("2026-12-01T00:00:00Z"),
        None,
    );
    let m = input_error(&a);
    assert!(
        m.contains("--since 2026-12-02T00:00:00Z is not before --until"),
        "{m}"
    );
}

#[test]
fn half_a_range_or_none_is_refused() {
    assert!(input_error(&args(Some("2026-12-01T00:00:00Z"), None, None)).contains("--until"));
    assert!(input_error(&args(None, Some("2026-12-01T00:00:00Z"), None)).contains("--since"));
    assert!(input_error(&args(None, None, None)).contains("--period"));
    assert!(input_error(&args(Some("yesterday"), Some("today"), None)).contains("RFC 3339"));
}

#[test]
fn a_range_and_a_period_become_the_request() {
    let r = request(&args(
        Some("1970-01-01T01:00:00Z"),
        Some("1970-01-01T03:00:00Z"),
        None,
    ))
    .unwrap();
    assert_eq!(
        (r.since_ms, r.until_ms, r.period),
        (3_600_000, 10_800_000, 0)
    );
    let r = request(&args(None, None, Some(PeriodArg::Previous))).unwrap();
    assert_eq!(r.period, pb::UsagePeriod::Previous as i32);
}

fn answer() -> pb::UsageResponse {
    let c = |admitted, refused, stranded| pb::UsageCounts {
        admitted,
        refused,
        shaped: 0,
        fail_open: 0,
        stranded,
    };
    pb::UsageResponse {
        policy_id: "cq".into(),
        since_ms: 0,
        until_ms: 7_200_000,
        bucket_ms: 3_600_000,
        rows: vec![
            pb::UsageRow {
                key: "cq:tenant=a,b".into(),
                holder_id: "gw-1".into(),
                counts: Some(c(7, 3, 0)),
            },
            pb::UsageRow {
                key: "cq:tenant=z".into(),
                holder_id: "gw-2".into(),
                counts: Some(c(1, 0, 2)),
            },
        ],
        truncated: false,
        total: Some(c(8, 3, 2)),
        overflow: Some(c(0, 0, 0)),
        oldest_kept_ms: 0,
        retention_hours: 960,
        report_lag_max_ms: 31_000,
        now_ms: 7_000_000,
    }
}

#[test]
fn the_table_states_range_rows_total_and_precision() {
    let out = rendered(&answer(), true);
    let lines: Vec<&str> = out.text.lines().collect();
    assert_eq!(
        lines[0],
        "Usage of policy cq from 1970-01-01T00:00:00Z to 1970-01-01T02:00:00Z"
    );
    assert!(lines[1].starts_with("KEY"), "{}", out.text);
    assert!(
        lines[2].contains("gw-1") && lines[2].ends_with("7        3       0          0         0"),
        "{}",
        out.text
    );
    assert!(lines[4].starts_with("TOTAL"), "{}", out.text);
    assert!(out.text.contains("1h buckets"), "{}", out.text);
    assert!(out.text.contains("at most 31s"), "{}", out.text);
    assert!(out.text.contains("counted as spent"), "{}", out.text);
}

#[test]
fn json_and_csv_carry_the_same_figures() {
    let out = rendered(&answer(), true);
    assert_eq!(out.json["rows"][1]["counts"]["stranded"], 2);
    assert_eq!(out.json["total"]["admitted"], 8);
    assert_eq!(out.json["precision"]["report_lag_max_ms"], 31_000);
    let csv = out.csv.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "policy,key,holder,since,until,admitted,refused,shaped,fail_open,stranded,bucket_ms,report_lag_max_ms"
    );
    assert_eq!(
        lines[1],
        "cq,\"cq:tenant=a,b\",gw-1,1970-01-01T00:00:00Z,1970-01-01T02:00:00Z,7,3,0,0,0,3600000,31000"
    );
    assert_eq!(lines.len(), 3, "rows only, no total: a sum of the rows");
}

#[test]
fn one_key_is_asked_for_beside_the_connection_flags() {
    use crate::args::{Cli, Command};
    use clap::Parser;
    let cli = Cli::try_parse_from([
        "leasectl",
        "--key",
        "admin-key.pem",
        "usage",
        "--policy",
        "cq",
        "--for-key",
        "cq:tenant=acme",
        "--period",
        "current",
    ])
    .unwrap();
    let Command::Usage(a) = cli.command else {
        panic!("not usage: {:?}", cli.command)
    };
    assert_eq!(a.for_key.as_deref(), Some("cq:tenant=acme"));
    assert_eq!(request(&a).unwrap().key, "cq:tenant=acme");
    assert_eq!(cli.conn.key.unwrap().to_str(), Some("admin-key.pem"));
}
