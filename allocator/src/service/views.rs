//! Read-only answers the admin service computes from the replicated state.

use crate::state::AllocatorState;
use leasehold_common::policy::{diff, Policy};
use leasehold_proto::leasehold::v1 as pb;
use tonic::Status;

/// Changes between two kept versions of a policy, or between one and a candidate document.
pub fn diff_view(
    s: &AllocatorState,
    r: &pb::DiffPolicyRequest,
    candidate: Option<&Policy>,
) -> Result<pb::DiffPolicyResponse, Status> {
    let cur = s
        .policies()
        .get(&r.policy_id)
        .ok_or_else(|| Status::not_found(format!("no policy '{}'", r.policy_id)))?;
    let from_v = if r.from_version == 0 {
        cur.version
    } else {
        r.from_version
    };
    let from = s
        .policies()
        .get_version(&r.policy_id, from_v)
        .map_err(|e| Status::not_found(e.to_string()))?;
    let (to_v, changes) = match candidate {
        Some(p) => (0, diff(&from.policy, p)),
        None => {
            let to_v = if r.to_version == 0 {
                cur.version
            } else {
                r.to_version
            };
            let to = s
                .policies()
                .get_version(&r.policy_id, to_v)
                .map_err(|e| Status::not_found(e.to_string()))?;
            (to_v, diff(&from.policy, &to.policy))
        }
    };
    let text: Vec<String> = changes.iter().map(ToString::to_string).collect();
    Ok(pb::DiffPolicyResponse {
        from_version: from_v,
        to_version: to_v,
        diff: text.join("\n"),
    })
}

/// The children of a budget split: each one's share of the rate by weight.
pub fn split_children(
    weights: &std::collections::BTreeMap<String, u64>,
    rate_milli: u128,
    reserve_ppm: u32,
) -> Vec<pb::BudgetNode> {
    let total: u128 = weights.values().map(|w| u128::from(*w)).sum();
    weights
        .iter()
        .map(|(name, w)| pb::BudgetNode {
            level: "holder".into(),
            name: name.clone(),
            weight: u32::try_from(*w).unwrap_or(u32::MAX),
            rate_milli_per_sec: u64::try_from(rate_milli * u128::from(*w) / total.max(1))
                .unwrap_or(u64::MAX),
            reserve_ppm,
            ..Default::default()
        })
        .collect()
}
