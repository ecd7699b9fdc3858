//! `leasectl cluster …`, `emergency …`, `audit …` and `status`.

use super::args::{AuditCmd, ClusterCmd, EmergencyCmd};
use super::budget::parse_rate_milli;
use super::client::Admin;
use super::error::CtlError;
use super::output::{Rendered, Table};
use leasehold_proto::leasehold::v1 as pb;
use serde_json::{json, Value};
use std::io::Write;

fn role_name(role: i32) -> &'static str {
    match pb::MemberRole::try_from(role) {
        Ok(pb::MemberRole::Voter) => "voter",
        Ok(pb::MemberRole::Learner) => "learner",
        _ => "unknown",
    }
}

fn members_table(members: &[pb::ClusterMember], leader_id: u64) -> (String, Value) {
    let mut t = Table::new(&[
        "NODE",
        "ADDRESS",
        "ROLE",
        "HEALTHY",
        "MATCHED",
        "CONTACT(ms)",
    ]);
    let mut rows = Vec::new();
    for m in members {
        let role = if m.node_id == leader_id {
            "leader"
        } else {
            role_name(m.role)
        };
        t.row(vec![
            m.node_id.to_string(),
            m.addr.clone(),
            role.into(),
            if m.healthy { "yes" } else { "NO" }.into(),
            m.matched_index.to_string(),
            m.last_contact_age_ms.to_string(),
        ]);
        rows.push(json!({"node_id": m.node_id, "addr": m.addr, "role": role, "healthy": m.healthy, "matched_index": m.matched_index, "last_contact_age_ms": m.last_contact_age_ms}));
    }
    (t.render(), json!(rows))
}

async fn cluster_status(admin: &mut Admin) -> Result<pb::ClusterStatusResponse, CtlError> {
    admin
        .call(|mut c| async move { c.cluster_status(pb::ClusterStatusRequest {}).await })
        .await
}

pub async fn run_cluster(admin: &mut Admin, cmd: ClusterCmd) -> Result<Rendered, CtlError> {
    let r = match cmd {
        ClusterCmd::Status => {
            let s = cluster_status(admin).await?;
            let (table, members) = members_table(&s.members, s.leader_id);
            let text = format!(
                "cluster {} ({} level), leader {}, term {}, last log {}, committed {}, snapshot {}\n{table}",
                s.cluster_id, s.level, s.leader_id, s.term, s.last_log_index, s.committed_index, s.snapshot_index
            );
            return Ok(Rendered::new(
                text,
                json!({"cluster_id": s.cluster_id, "level": s.level, "node_id": s.node_id, "leader_id": s.leader_id, "term": s.term, "last_log_index": s.last_log_index, "committed_index": s.committed_index, "snapshot_index": s.snapshot_index, "members": members}),
            ));
        }
        ClusterCmd::Add { node_id, addr } => {
            let req = pb::AddLearnerRequest { node_id, addr };
            admin
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.add_learner(req).await }
                })
                .await?
        }
        ClusterCmd::Promote { node_id } => admin
            .call(|mut c| async move { c.promote_voter(pb::PromoteVoterRequest { node_id }).await })
            .await?,
        ClusterCmd::Remove { node_id } => {
            admin
                .call(|mut c| async move { c.remove_node(pb::RemoveNodeRequest { node_id }).await })
                .await?
        }
    };
    let (table, members) = members_table(&r.members, 0);
    Ok(Rendered::new(
        format!("membership changed at log index {}\n{table}", r.log_index),
        json!({"log_index": r.log_index, "members": members}),
    ))
}

pub async fn run_emergency(admin: &mut Admin, cmd: EmergencyCmd) -> Result<Rendered, CtlError> {
    let (switch, reason) = match cmd {
        EmergencyCmd::FailOpen { policy, reason } => (
            pb::EmergencySwitch {
                policy_id: policy,
                mode: pb::EmergencyMode::FailOpen as i32,
                min_priority: 0,
                restricted_rate_milli_per_sec: 0,
            },
            reason,
        ),
        EmergencyCmd::Normal { policy, reason } => (
            pb::EmergencySwitch {
                policy_id: policy,
                mode: pb::EmergencyMode::Normal as i32,
                min_priority: 0,
                restricted_rate_milli_per_sec: 0,
            },
            reason,
        ),
        EmergencyCmd::Restricted {
            policy,
            min_priority,
            rate,
            reason,
        } => (
            pb::EmergencySwitch {
                policy_id: policy,
                mode: pb::EmergencyMode::Restricted as i32,
                min_priority,
                restricted_rate_milli_per_sec: parse_rate_milli(&rate)?,
            },
            reason,
        ),
    };
    let req = pb::SetEmergencyRequest {
        emergency: Some(switch.clone()),
        reason,
    };
    let r = admin
        .call(|mut c| {
            let req = req.clone();
            async move { c.set_emergency(req).await }
        })
        .await?;
    let mode = |m: i32| pb::EmergencyMode::try_from(m).map_or("unknown", |m| m.as_str_name());
    let before = r
        .previous
        .as_ref()
        .map_or("EMERGENCY_MODE_NORMAL", |p| mode(p.mode));
    Ok(Rendered::new(
        format!(
            "policy {}: {} -> {} (pushed to holders at watch seq {})\n",
            switch.policy_id,
            before,
            mode(switch.mode),
            r.watch_seq
        ),
        json!({"policy_id": switch.policy_id, "before": before, "after": mode(switch.mode), "watch_seq": r.watch_seq}),
    ))
}

fn audit_line(e: &pb::AuditEntry) -> String {
    let at = jiff::Timestamp::from_millisecond(e.at_ms as i64)
        .map_or_else(|_| e.at_ms.to_string(), |t| t.to_string());
    let reason = if e.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", e.reason)
    };
    format!(
        "#{} {at} {} {} {}{reason}\n  before: {}\n  after:  {}\n",
        e.seq,
        e.actor,
        e.action,
        e.target,
        one_line(&e.before),
        one_line(&e.after)
    )
}

fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 160 {
        format!("{}…", flat.chars().take(160).collect::<String>())
    } else {
        flat
    }
}

fn audit_json(e: &pb::AuditEntry) -> Value {
    json!({"seq": e.seq, "at_ms": e.at_ms, "actor": e.actor, "action": e.action, "target": e.target, "before": e.before, "after": e.after, "content_type": e.content_type, "reason": e.reason})
}

/// Streams audit entries; with `follow`, prints each as it arrives (JSON lines with `json`).
pub async fn run_audit(
    admin: &mut Admin,
    cmd: AuditCmd,
    json_out: bool,
) -> Result<Rendered, CtlError> {
    let AuditCmd::Tail {
        limit,
        follow,
        actor,
    } = cmd;
    let req = pb::TailAuditRequest {
        after_seq: 0,
        follow,
        limit,
        actor: actor.unwrap_or_default(),
        target_prefix: String::new(),
    };
    let mut stream = admin
        .call(|mut c| {
            let req = req.clone();
            async move { c.tail_audit(req).await }
        })
        .await?;
    let mut entries = Vec::new();
    let mut text = String::new();
    while let Some(e) = stream.message().await.map_err(CtlError::Rpc)? {
        if follow {
            let line = if json_out {
                format!("{}\n", audit_json(&e))
            } else {
                audit_line(&e)
            };
            std::io::stdout()
                .write_all(line.as_bytes())
                .map_err(|e| CtlError::Output(e.to_string()))?;
            continue;
        }
        text.push_str(&audit_line(&e));
        entries.push(audit_json(&e));
    }
    Ok(Rendered::new(text, json!(entries)))
}

pub async fn run_status(admin: &mut Admin) -> Result<Rendered, CtlError> {
    let s = cluster_status(admin).await?;
    let policies = admin
        .call(|mut c| async move {
            c.list_policies(pb::ListPoliciesRequest {
                after_policy_id: String::new(),
                limit: 1_000,
            })
            .await
        })
        .await?;
    let healthy = s.members.iter().filter(|m| m.healthy).count();
    let voters = s
        .members
        .iter()
        .filter(|m| m.role == pb::MemberRole::Voter as i32)
        .count();
    let verdict = if s.leader_id != 0 && healthy * 2 > voters.max(1) {
        "healthy"
    } else {
        "DEGRADED"
    };
    let text = format!(
        "cluster {} ({}): {verdict}\n  leader   node {} (term {})\n  members  {} healthy of {}\n  log      last {} committed {}\n  policies {}\n",
        s.cluster_id, s.level, s.leader_id, s.term, healthy, s.members.len(), s.last_log_index, s.committed_index, policies.policies.len()
    );
    Ok(Rendered::new(
        text,
        json!({"cluster_id": s.cluster_id, "level": s.level, "healthy": verdict == "healthy", "leader_id": s.leader_id, "term": s.term, "members": s.members.len(), "healthy_members": healthy, "policies": policies.policies.len()}),
    ))
}
