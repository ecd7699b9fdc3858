//! `leasectl usage`: what holders reported per policy key (and holder), with the precision
//! the figures have, for reconciling with billing.

use super::args::{PeriodArg, UsageArgs};
use super::client::Admin;
use super::error::CtlError;
use super::output::{csv_field, Rendered, Table};
use leasehold_proto::leasehold::v1 as pb;
use serde_json::{json, Value};

/// What the figures promise, printed with every answer.
fn precision(r: &pb::UsageResponse) -> String {
    format!(
        "Precision: admitted, refused, shaped and fail_open are what holders reported, booked in \
         {bucket} buckets by the time the allocator applied each report, so they lag the traffic \
         by at most one report interval (at most {lag} for this policy: lease ttl plus grace). \
         Stranded is credit of leases that expired unreported, counted as spent. Kept {hours} \
         hours{oldest}.\n",
        bucket = duration(r.bucket_ms),
        lag = duration(r.report_lag_max_ms),
        hours = r.retention_hours,
        oldest = match r.oldest_kept_ms {
            0 => String::new(),
            ms => format!("; oldest bucket kept starts {}", time(ms)),
        },
    )
}

fn duration(ms: u64) -> String {
    match ms {
        ms if ms >= 3_600_000 && ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        ms if ms.is_multiple_of(1_000) => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

/// Unix milliseconds as RFC 3339 (UTC).
fn time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| format!("{ms} ms"), |t| t.to_string())
}

fn parse_time(flag: &str, text: &str) -> Result<u64, CtlError> {
    let ts: jiff::Timestamp = text
        .parse()
        .map_err(|e| CtlError::Input(format!("{flag} '{text}': not an RFC 3339 time ({e})")))?;
    u64::try_from(ts.as_millisecond())
        .map_err(|_| CtlError::Input(format!("{flag} '{text}': before 1970")))
}

/// The request `args` ask for, or what is wrong with them.
pub fn request(args: &UsageArgs) -> Result<pb::UsageRequest, CtlError> {
    let mut req = pb::UsageRequest {
        policy_id: args.policy.clone(),
        key: args.for_key.clone().unwrap_or_default(),
        per_holder: args.holder,
        limit: args.limit,
        ..Default::default()
    };
    match (&args.since, &args.until, args.period) {
        (None, None, Some(p)) => {
            req.period = match p {
                PeriodArg::Current => pb::UsagePeriod::Current,
                PeriodArg::Previous => pb::UsagePeriod::Previous,
            } as i32;
        }
        (Some(since), Some(until), None) => {
            req.since_ms = parse_time("--since", since)?;
            req.until_ms = parse_time("--until", until)?;
            if req.since_ms >= req.until_ms {
                return Err(CtlError::Input(format!(
                    "--since {since} is not before --until {until}"
                )));
            }
        }
        (Some(_), None, _) => return Err(CtlError::Input("--since needs --until".into())),
        (None, Some(_), _) => return Err(CtlError::Input("--until needs --since".into())),
        _ => {
            return Err(CtlError::Input(
                "give --since and --until, or --period current|previous".into(),
            ))
        }
    }
    Ok(req)
}

pub async fn run(admin: &mut Admin, args: UsageArgs) -> Result<Rendered, CtlError> {
    let req = request(&args)?;
    let r = admin
        .call(|mut c| {
            let req = req.clone();
            async move { c.usage(req).await }
        })
        .await?;
    Ok(rendered(&r, args.holder))
}

const COLUMNS: [&str; 5] = ["admitted", "refused", "shaped", "fail_open", "stranded"];

fn cells(c: &pb::UsageCounts) -> [u64; 5] {
    [c.admitted, c.refused, c.shaped, c.fail_open, c.stranded]
}

fn counts_json(c: &pb::UsageCounts) -> Value {
    let v = cells(c);
    json!({
        "admitted": v[0], "refused": v[1], "shaped": v[2], "fail_open": v[3], "stranded": v[4],
    })
}

/// The answer as a table with its range and precision, as JSON and as CSV.
pub fn rendered(r: &pb::UsageResponse, per_holder: bool) -> Rendered {
    let zero = pb::UsageCounts::default();
    let (since, until) = (time(r.since_ms), time(r.until_ms));
    let mut headers = vec!["KEY"];
    if per_holder {
        headers.push("HOLDER");
    }
    headers.extend(["ADMITTED", "REFUSED", "SHAPED", "FAIL_OPEN", "STRANDED"]);
    let mut table = Table::new(&headers);
    let mut csv = String::from("policy,key");
    if per_holder {
        csv.push_str(",holder");
    }
    // Each row carries the precision of its figures, so a row copied alone keeps it.
    csv.push_str(
        ",since,until,admitted,refused,shaped,fail_open,stranded,bucket_ms,report_lag_max_ms\n",
    );
    let mut add = |key: &str, holder: &str, c: &pb::UsageCounts| {
        let mut row = vec![key.to_owned()];
        let mut line = vec![csv_field(&r.policy_id), csv_field(key)];
        if per_holder {
            row.push(holder.to_owned());
            line.push(csv_field(holder));
        }
        line.extend([since.clone(), until.clone()]);
        for v in cells(c) {
            row.push(v.to_string());
            line.push(v.to_string());
        }
        line.extend([r.bucket_ms.to_string(), r.report_lag_max_ms.to_string()]);
        table.row(row);
        csv.push_str(&line.join(","));
        csv.push('\n');
    };
    for row in &r.rows {
        add(
            &row.key,
            &row.holder_id,
            row.counts.as_ref().unwrap_or(&zero),
        );
    }
    let overflow = r.overflow.as_ref().unwrap_or(&zero);
    if cells(overflow).iter().any(|v| *v > 0) {
        add("(overflow: rows past the cap)", "", overflow);
    }
    let total = r.total.as_ref().unwrap_or(&zero);
    let mut total_row = vec!["TOTAL".to_owned()];
    if per_holder {
        total_row.push(String::new());
    }
    total_row.extend(cells(total).iter().map(u64::to_string));
    table.row(total_row);

    let mut text = format!("Usage of policy {} from {since} to {until}\n", r.policy_id);
    text.push_str(&table.render());
    if r.truncated {
        text.push_str("(more rows than the limit; TOTAL covers them all)\n");
    }
    text.push_str(&precision(r));

    let rows: Vec<Value> = r
        .rows
        .iter()
        .map(|row| {
            let mut v = json!({"key": row.key});
            if per_holder {
                v["holder"] = json!(row.holder_id);
            }
            v["counts"] = counts_json(row.counts.as_ref().unwrap_or(&zero));
            v
        })
        .collect();
    let json = json!({
        "policy": r.policy_id,
        "since": since,
        "until": until,
        "since_ms": r.since_ms,
        "until_ms": r.until_ms,
        "columns": COLUMNS,
        "rows": rows,
        "truncated": r.truncated,
        "overflow": counts_json(overflow),
        "total": counts_json(total),
        "precision": {
            "bucket_ms": r.bucket_ms,
            "report_lag_max_ms": r.report_lag_max_ms,
            "stranded_counted_as_spent": true,
            "retention_hours": r.retention_hours,
            "oldest_kept_ms": r.oldest_kept_ms,
            "text": precision(r).trim_end(),
        },
        "now_ms": r.now_ms,
    });
    Rendered::new(text, json).with_csv(csv)
}

#[cfg(test)]
mod tests;
