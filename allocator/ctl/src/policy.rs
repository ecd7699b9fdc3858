//! `leasectl policy …`

use super::args::PolicyCmd;
use super::client::Admin;
use super::documents::{read_directory, read_document, Document};
use super::error::CtlError;
use super::output::{emergency_json, emergency_text, Rendered, Table};
use leasehold_common::policy::Policy;
use leasehold_proto::leasehold::v1 as pb;
use serde_json::json;
use std::path::Path;

fn parse_effective_at(text: &Option<String>) -> Result<u64, CtlError> {
    let Some(text) = text else { return Ok(0) };
    let ts: jiff::Timestamp = text.parse().map_err(|e| {
        CtlError::Input(format!(
            "--effective-at '{text}': not an RFC 3339 time ({e})"
        ))
    })?;
    u64::try_from(ts.as_millisecond())
        .map_err(|_| CtlError::Input(format!("--effective-at '{text}': before 1970")))
}

/// What `policy diff` prints: the field changes, then the keys they affect.
fn diff_rendered(r: &pb::DiffPolicyResponse) -> Rendered {
    let to = if r.to_version == 0 {
        "the proposed text".to_string()
    } else {
        r.to_version.to_string()
    };
    if r.diff.is_empty() {
        return Rendered::new(
            format!("no change between version {} and {to}\n", r.from_version),
            json!({"from_version": r.from_version, "to_version": r.to_version, "diff": r.diff,
                   "affected_keys": [], "affected_keys_total": 0}),
        );
    }
    let mut text = format!(
        "from version {} to {to}:\n{}\n",
        r.from_version,
        r.diff.trim_end()
    );
    let mut t = Table::new(&["KEY", "OUTSTANDING", "LEASES", "HOLDERS"]);
    let mut keys = Vec::new();
    for k in &r.affected_keys {
        let more = k.holders_total.saturating_sub(k.holders.len() as u64);
        let mut holders = k.holders.join(",");
        if more > 0 {
            holders.push_str(&format!(" (+{more})"));
        }
        t.row(vec![
            k.key.clone(),
            k.outstanding.to_string(),
            k.leases.to_string(),
            holders,
        ]);
        keys.push(
            json!({"key": k.key, "outstanding": k.outstanding, "leases": k.leases,
                         "holders": k.holders, "holders_total": k.holders_total}),
        );
    }
    text.push_str(&format!(
        "affects {} key(s) with state on this allocator",
        r.affected_keys_total
    ));
    if r.affected_keys_total > r.affected_keys.len() as u64 {
        text.push_str(&format!(" (first {} shown)", r.affected_keys.len()));
    }
    text.push('\n');
    if !r.affected_keys.is_empty() {
        text.push_str(&t.render());
    }
    Rendered::new(
        text,
        json!({"from_version": r.from_version, "to_version": r.to_version, "diff": r.diff,
               "affected_keys": keys, "affected_keys_total": r.affected_keys_total}),
    )
}

pub async fn run(admin: &mut Admin, cmd: PolicyCmd) -> Result<Rendered, CtlError> {
    match cmd {
        PolicyCmd::Apply {
            file,
            shadow,
            effective_at,
            dry_run,
        } => {
            let how = Apply {
                shadow,
                effective_at_ms: parse_effective_at(&effective_at)?,
                dry_run,
            };
            if file.is_dir() {
                return apply_directory(admin, &file, &how).await;
            }
            let r = how.send(admin, read_document(&file)?).await?;
            let (text, json) = applied_rendered(&r, dry_run);
            Ok(Rendered::new(text, json))
        }
        PolicyCmd::Ls => {
            let r = admin
                .call(|mut c| async move {
                    c.list_policies(pb::ListPoliciesRequest {
                        after_policy_id: String::new(),
                        limit: 1_000,
                    })
                    .await
                })
                .await?;
            let mut t = Table::new(&[
                "POLICY",
                "VERSION",
                "MODE",
                "KILL",
                "EMERGENCY",
                "UPDATED BY",
            ]);
            let mut rows = Vec::new();
            for p in &r.policies {
                let mode = if p.shadow { "shadow" } else { "enforce" };
                let emergency = p.emergency.clone().unwrap_or_default();
                t.row(vec![
                    p.policy_id.clone(),
                    p.version.to_string(),
                    mode.into(),
                    if p.kill_switch { "on" } else { "off" }.into(),
                    emergency_text(&emergency),
                    p.updated_by.clone(),
                ]);
                rows.push(json!({"policy_id": p.policy_id, "version": p.version, "shadow": p.shadow, "kill_switch": p.kill_switch, "updated_by": p.updated_by, "updated_at_ms": p.updated_at_ms, "emergency": emergency_json(&emergency)}));
            }
            Ok(Rendered::new(t.render(), json!(rows)))
        }
        PolicyCmd::Get { policy_id, version } => {
            let req = pb::GetPolicyRequest {
                policy_id,
                version: version.unwrap_or(0),
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.get_policy(req).await }
                })
                .await?;
            let p = r.policy.unwrap_or_default();
            let s = r.summary.unwrap_or_default();
            let sh = r.shadow_stats.unwrap_or_default();
            let mut text = format!(
                "# policy {} version {} (updated by {})\n",
                p.policy_id, p.version, s.updated_by
            );
            if p.shadow {
                text.push_str(&format!(
                    "# shadow mode: holders report {} requests it would have denied\n",
                    sh.would_deny_requests
                ));
            }
            let rules = rule_policies(&p.yaml);
            for (rule_id, policy_id) in &rules {
                text.push_str(&format!(
                    "# rule {rule_id} is enforced as policy {policy_id}\n"
                ));
            }
            text.push_str(&p.yaml);
            let rules: Vec<_> = rules
                .iter()
                .map(|(rule_id, policy_id)| json!({"rule_id": rule_id, "policy_id": policy_id}))
                .collect();
            Ok(Rendered::new(
                text,
                json!({"policy_id": p.policy_id, "version": p.version, "yaml": p.yaml, "shadow": p.shadow,
                       "kill_switch": p.kill_switch, "updated_by": s.updated_by,
                       "shadow_would_deny_requests": sh.would_deny_requests, "shadow_would_deny_units": sh.would_deny_units,
                       "shadow_since_ms": sh.since_ms, "rules": rules}),
            ))
        }
        PolicyCmd::Diff {
            policy_id,
            file,
            from,
            to,
        } => {
            let yaml = match &file {
                Some(f) => read_document(f)?,
                None => String::new(),
            };
            let req = pb::DiffPolicyRequest {
                policy_id,
                from_version: from.unwrap_or(0),
                to_version: to.unwrap_or(0),
                yaml,
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.diff_policy(req).await }
                })
                .await?;
            Ok(diff_rendered(&r))
        }
        PolicyCmd::Rollback {
            policy_id,
            to_version,
            dry_run,
        } => {
            let req = pb::RollbackPolicyRequest {
                policy_id: policy_id.clone(),
                to_version,
                dry_run,
            };
            let r = admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.rollback_policy(req).await }
                })
                .await?;
            let text = format!(
                "policy {policy_id} {} version {} (content of version {to_version})\n{}",
                if dry_run { "would become" } else { "is now" },
                r.version,
                r.diff
            );
            Ok(Rendered::new(
                text,
                json!({"policy_id": policy_id, "version": r.version, "rolled_back_to": to_version, "diff": r.diff, "dry_run": dry_run}),
            ))
        }
    }
}

/// How `policy apply` applies each document.
struct Apply {
    shadow: bool,
    effective_at_ms: u64,
    dry_run: bool,
}

impl Apply {
    async fn send(
        &self,
        admin: &mut Admin,
        yaml: String,
    ) -> Result<pb::ApplyPolicyResponse, CtlError> {
        let req = pb::ApplyPolicyRequest {
            yaml,
            shadow: self.shadow,
            effective_at_ms: self.effective_at_ms,
            dry_run: self.dry_run,
            expected_version: 0,
        };
        admin
            .call(|mut c| {
                let req = req.clone();
                async move { c.apply_policy(req).await }
            })
            .await
    }
}

/// Applies every document of `dir` in file-name order. They were all checked first; one the
/// allocator refuses stops the rest, and the error names it and what was applied before.
async fn apply_directory(admin: &mut Admin, dir: &Path, how: &Apply) -> Result<Rendered, CtlError> {
    let docs = read_directory(dir)?;
    let mut text = String::new();
    let mut rows = Vec::with_capacity(docs.len());
    let mut applied = Vec::new();
    for Document { name, text: yaml } in docs {
        let r = match how.send(admin, yaml).await {
            Ok(r) => r,
            Err(source) => {
                return Err(CtlError::Partial {
                    file: name,
                    applied,
                    source: Box::new(source),
                })
            }
        };
        let (lines, mut row) = applied_rendered(&r, how.dry_run);
        text.push_str(&format!("{name}: {lines}"));
        row["file"] = json!(name);
        rows.push(row);
        applied.push(format!(
            "{name} (policy {} version {})",
            r.policy_id, r.version
        ));
    }
    Ok(Rendered::new(text, json!(rows)))
}

/// What `policy apply` prints for one document.
fn applied_rendered(r: &pb::ApplyPolicyResponse, dry_run: bool) -> (String, serde_json::Value) {
    let verb = match (dry_run, r.changed) {
        (true, _) => "would become",
        (false, true) => "is now",
        (false, false) => "is unchanged at",
    };
    let mut text = format!("policy {} {verb} version {}\n", r.policy_id, r.version);
    if !r.diff.is_empty() {
        text.push_str(&r.diff);
        if !r.diff.ends_with('\n') {
            text.push('\n');
        }
    }
    let json = json!({"policy_id": r.policy_id, "version": r.version, "changed": r.changed,
                      "dry_run": dry_run, "diff": r.diff});
    (text, json)
}

/// For an envoyproxy/ratelimit domain document, each limited rule and the policy id it is
/// enforced (and leased, and shown by `budget show`) under.
fn rule_policies(yaml: &str) -> Vec<(String, String)> {
    let Some(Ok(rules)) = Policy::from_yaml(yaml).ok().and_then(|p| p.domain_rules()) else {
        return Vec::new();
    };
    rules
        .policies()
        .map(|(rule_id, p)| (rule_id.to_owned(), p.id.clone()))
        .collect()
}
