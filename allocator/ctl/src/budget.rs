//! `leasectl budget …` and `leasectl lease …`

use super::args::{BudgetCmd, LeaseCmd};
use super::client::Admin;
use super::error::CtlError;
use super::output::{pct, per_sec, Rendered, Table};
use leasehold_common::policy::Ppm;
use leasehold_proto::leasehold::v1 as pb;
use serde_json::{json, Value};

/// `"1.5"` units per second as milli-units per second, exactly.
pub fn parse_rate_milli(text: &str) -> Result<u64, CtlError> {
    let bad = || {
        CtlError::Input(format!(
            "rate '{text}': expected units per second like 100 or 0.5"
        ))
    };
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || whole.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let frac_milli: u64 = format!("{frac:0<3}").parse().map_err(|_| bad())?;
    let milli = whole
        .checked_mul(1_000)
        .and_then(|w| w.checked_add(frac_milli))
        .ok_or_else(bad)?;
    if milli == 0 {
        return Err(CtlError::Input(format!("rate '{text}': must be positive")));
    }
    Ok(milli)
}

fn parse_share(text: &str) -> Result<pb::BudgetShare, CtlError> {
    let (name, weight) = text.split_once('=').ok_or_else(|| {
        CtlError::Input(format!("--share '{text}': expected NAME=WEIGHT, e.g. eu=3"))
    })?;
    let weight: u32 = weight.parse().ok().filter(|w| *w > 0).ok_or_else(|| {
        CtlError::Input(format!(
            "--share '{text}': weight must be a positive integer"
        ))
    })?;
    if name.is_empty() {
        return Err(CtlError::Input(format!("--share '{text}': name is empty")));
    }
    Ok(pb::BudgetShare {
        name: name.to_string(),
        weight,
    })
}

fn node_json(n: &pb::BudgetNode) -> Value {
    json!({
        "level": n.level, "name": n.name, "rate_per_sec": n.rate_milli_per_sec as f64 / 1000.0,
        "burst": n.burst, "granted": n.granted, "outstanding": n.outstanding, "used": n.used,
        "utilisation": n.utilisation_ppm as f64 / 1e6, "weight": n.weight,
        "reserve": n.reserve_ppm as f64 / 1e6,
        "children": n.children.iter().map(node_json).collect::<Vec<_>>(),
    })
}

fn ms_text(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64).map_or_else(|_| ms.to_string(), |t| t.to_string())
}

/// Each key's current window or period: used and remaining units.
fn windows_table(rows: &[pb::WindowUsage], truncated: bool) -> String {
    let mut t = Table::new(&[
        "KEY",
        "WINDOW START",
        "WINDOW END",
        "LIMIT",
        "USED",
        "REMAINING",
    ]);
    for w in rows {
        t.row(vec![
            w.key.clone(),
            ms_text(w.start_ms),
            ms_text(w.end_ms),
            w.limit.to_string(),
            w.used.to_string(),
            w.remaining.to_string(),
        ]);
    }
    let more = if truncated {
        "(more keys: name one with --for-key)\n"
    } else {
        ""
    };
    format!("\ncurrent window per key\n{}{more}", t.render())
}

fn window_json(w: &pb::WindowUsage) -> Value {
    json!({
        "key": w.key, "start_ms": w.start_ms, "end_ms": w.end_ms, "limit": w.limit,
        "used": w.used, "remaining": w.remaining,
    })
}

fn tree_rows(n: &pb::BudgetNode, depth: usize, t: &mut Table) {
    let indent = if depth == 0 {
        String::new()
    } else {
        format!("{}└ ", "  ".repeat(depth - 1))
    };
    // A holder has no bucket of its own: its rate and burst are the policy's, not its.
    let (rate, burst) = if n.level == "holder" {
        ("-".to_owned(), "-".to_owned())
    } else {
        (per_sec(n.rate_milli_per_sec), n.burst.to_string())
    };
    t.row(vec![
        format!("{indent}{} {}", n.level, n.name),
        rate,
        burst,
        n.granted.to_string(),
        n.outstanding.to_string(),
        n.used.to_string(),
        pct(u64::from(n.utilisation_ppm)),
    ]);
    for c in &n.children {
        tree_rows(c, depth + 1, t);
    }
}

/// What `budget set` prints: old and new values, the version and the field changes.
fn set_rendered(policy_id: &str, r: &pb::SetBudgetResponse) -> Rendered {
    let verdict = match (r.dry_run, r.changed) {
        (true, true) => format!(
            "dry run: would create version {}; nothing was changed",
            r.policy_version
        ),
        (true, false) => format!("dry run: no change; stays at version {}", r.policy_version),
        (false, true) => format!("now at version {}", r.policy_version),
        (false, false) => format!("unchanged at version {}", r.policy_version),
    };
    let mut text = format!(
        "policy {policy_id}: rate {}/s -> {}/s, burst {} -> {}\n{verdict}\n",
        per_sec(r.old_rate_milli_per_sec),
        per_sec(r.new_rate_milli_per_sec),
        r.old_burst,
        r.new_burst,
    );
    if !r.diff.is_empty() {
        text.push_str(r.diff.trim_end());
        text.push('\n');
    }
    let json = json!({
        "policy_id": policy_id, "policy_version": r.policy_version, "changed": r.changed,
        "dry_run": r.dry_run, "diff": r.diff,
        "old": {"rate_milli_per_sec": r.old_rate_milli_per_sec, "burst": r.old_burst},
        "new": {"rate_milli_per_sec": r.new_rate_milli_per_sec, "burst": r.new_burst},
    });
    Rendered::new(text, json)
}

pub async fn run(admin: &mut Admin, cmd: BudgetCmd) -> Result<Rendered, CtlError> {
    match cmd {
        BudgetCmd::Show { policy_id, for_key } => {
            let req = pb::ShowBudgetRequest {
                policy_id,
                key: for_key.unwrap_or_default(),
                depth_max: 8,
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.show_budget(req).await }
                })
                .await?;
            let root = r.root.unwrap_or_default();
            let mut t = Table::new(&[
                "NODE",
                "RATE/S",
                "BURST",
                "GRANTED",
                "OUTSTANDING",
                "USED",
                "UTIL",
            ]);
            tree_rows(&root, 0, &mut t);
            // The server keeps no sliding measurement window: figures run from when each
            // key's state was created.
            let measured = if r.window_ms == 0 {
                "figures since each key was first leased".to_owned()
            } else {
                format!("utilisation over the last {} ms", r.window_ms)
            };
            let mut text = format!(
                "policy version {}, {measured}\n{}",
                r.policy_version,
                t.render()
            );
            if !r.windows.is_empty() {
                text.push_str(&windows_table(&r.windows, r.windows_truncated));
            }
            let windows: Vec<Value> = r.windows.iter().map(window_json).collect();
            Ok(Rendered::new(
                text,
                json!({"policy_version": r.policy_version, "window_ms": r.window_ms, "root": node_json(&root), "windows": windows, "windows_truncated": r.windows_truncated}),
            ))
        }
        BudgetCmd::Set {
            policy_id,
            rate,
            burst,
            dry_run,
        } => {
            let req = pb::SetBudgetRequest {
                policy_id: policy_id.clone(),
                node_path: String::new(),
                rate_milli_per_sec: parse_rate_milli(&rate)?,
                burst,
                dry_run,
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.set_budget(req).await }
                })
                .await?;
            Ok(set_rendered(&policy_id, &r))
        }
        BudgetCmd::Split {
            policy_id,
            shares,
            reserve,
            dry_run,
        } => {
            let children = shares
                .iter()
                .map(|s| parse_share(s))
                .collect::<Result<Vec<_>, _>>()?;
            let reserve_ppm = match reserve {
                Some(r) => u32::try_from(
                    Ppm::parse(&r)
                        .map_err(|e| CtlError::Input(format!("--reserve '{r}': {e}")))?
                        .0,
                )
                .map_err(|_| CtlError::Input(format!("--reserve '{r}': out of range")))?,
                None => 0,
            };
            let req = pb::SplitBudgetRequest {
                policy_id: policy_id.clone(),
                node_path: String::new(),
                children,
                reserve_ppm,
                dry_run,
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.split_budget(req).await }
                })
                .await?;
            let mut t = Table::new(&["CHILD", "WEIGHT", "RATE/S", "RESERVE"]);
            for c in &r.children {
                t.row(vec![
                    c.name.clone(),
                    c.weight.to_string(),
                    per_sec(c.rate_milli_per_sec),
                    pct(u64::from(c.reserve_ppm)),
                ]);
            }
            Ok(Rendered::new(
                t.render(),
                json!({"policy_id": policy_id, "policy_version": r.policy_version, "children": r.children.iter().map(node_json).collect::<Vec<_>>(), "dry_run": dry_run}),
            ))
        }
        BudgetCmd::Rebalance { policy_id, dry_run } => {
            let req = pb::RebalanceBudgetRequest {
                policy_id: policy_id.clone(),
                node_path: String::new(),
                dry_run,
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.rebalance_budget(req).await }
                })
                .await?;
            let mut t = Table::new(&["CHILD", "BEFORE/S", "AFTER/S"]);
            for c in &r.changes {
                t.row(vec![
                    c.name.clone(),
                    per_sec(c.before_rate_milli_per_sec),
                    per_sec(c.after_rate_milli_per_sec),
                ]);
            }
            let changes: Vec<Value> = r.changes.iter().map(|c| json!({"name": c.name, "before_per_sec": c.before_rate_milli_per_sec as f64 / 1000.0, "after_per_sec": c.after_rate_milli_per_sec as f64 / 1000.0})).collect();
            Ok(Rendered::new(
                t.render(),
                json!({"policy_id": policy_id, "changes": changes, "dry_run": dry_run}),
            ))
        }
    }
}

pub async fn run_lease(admin: &mut Admin, cmd: LeaseCmd) -> Result<Rendered, CtlError> {
    match cmd {
        LeaseCmd::Ls {
            holder,
            policy,
            limit,
        } => {
            let req = pb::ListLeasesRequest {
                holder_id: holder.unwrap_or_default(),
                policy_id: policy.unwrap_or_default(),
                after_lease_id: 0,
                limit,
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.list_leases(req).await }
                })
                .await?;
            let mut t = Table::new(&[
                "LEASE",
                "HOLDER",
                "KEY",
                "VERSION",
                "CREDIT",
                "USED",
                "GEN",
                "EXPIRES(ns)",
            ]);
            let mut rows = Vec::new();
            for s in &r.leases {
                let l = s.lease.clone().unwrap_or_default();
                t.row(vec![
                    l.lease_id.to_string(),
                    l.holder_id.clone(),
                    l.key.clone(),
                    l.policy_version.to_string(),
                    l.credit.to_string(),
                    s.used.to_string(),
                    l.generation.to_string(),
                    s.expires_at_ns.to_string(),
                ]);
                rows.push(json!({"lease_id": l.lease_id, "holder_id": l.holder_id, "policy_id": l.policy_id, "key": l.key, "policy_version": l.policy_version, "credit": l.credit, "used": s.used, "generation": l.generation, "expires_at_ns": s.expires_at_ns}));
            }
            Ok(Rendered::new(t.render(), json!(rows)))
        }
        LeaseCmd::Revoke { lease_id, reason } => {
            let req = pb::RevokeLeaseRequest { lease_id, reason };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.revoke_lease(req).await }
                })
                .await?;
            Ok(Rendered::new(
                format!("lease {lease_id} revoked; {} units outstanding until its holder releases it or it expires\n", r.outstanding),
                json!({"lease_id": lease_id, "outstanding": r.outstanding}),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_exactly_and_refuse_nonsense() {
        assert_eq!(parse_rate_milli("100").unwrap(), 100_000);
        assert_eq!(parse_rate_milli("0.5").unwrap(), 500);
        assert_eq!(parse_rate_milli("2.125").unwrap(), 2_125);
        for bad in ["", "0", "1.2345", "-1", "x", "."] {
            assert!(parse_rate_milli(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shares_name_their_problem() {
        assert_eq!(parse_share("eu=3").unwrap().weight, 3);
        let e = parse_share("eu").unwrap_err().to_string();
        assert!(e.contains("NAME=WEIGHT"), "{e}");
        let e = parse_share("eu=0").unwrap_err().to_string();
        assert!(e.contains("positive"), "{e}");
    }
}
