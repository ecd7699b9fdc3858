//! Read-only answers the admin service computes from the replicated state.

use crate::state::{ledger_policy_ids, AllocatorState};
use leasehold_common::policy::{diff, Policy};
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeSet;
use tonic::Status;

/// Affected keys listed by a policy diff; the rest are only counted.
pub const DIFF_KEYS_MAX: usize = 20;
/// Holders listed per affected key; the rest are only counted.
pub const DIFF_HOLDERS_PER_KEY_MAX: usize = 8;

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
    let (to_v, to) = match candidate {
        Some(p) => (0, p),
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
            (to_v, &to.policy)
        }
    };
    let changes = diff(&from.policy, to);
    let text: Vec<String> = changes.iter().map(ToString::to_string).collect();
    let (affected_keys, affected_keys_total) = if changes.is_empty() {
        (Vec::new(), 0)
    } else {
        // A domain's keys are its rules' keys, those of either side.
        let mut ids = ledger_policy_ids(&from.policy);
        ids.extend(ledger_policy_ids(to));
        affected_keys(s, &ids, DIFF_KEYS_MAX, DIFF_HOLDERS_PER_KEY_MAX)
    };
    Ok(pb::DiffPolicyResponse {
        from_version: from_v,
        to_version: to_v,
        diff: text.join("\n"),
        affected_keys,
        affected_keys_total,
    })
}

/// The keys with ledger state under any of `policy_ids`, in key order: the first
/// `keys_max` with their outstanding credit and (up to `holders_max`) holders, and how many
/// there are.
pub fn affected_keys(
    s: &AllocatorState,
    policy_ids: &BTreeSet<String>,
    keys_max: usize,
    holders_max: usize,
) -> (Vec<pb::KeyImpact>, u64) {
    let mut listed = Vec::new();
    let mut total = 0u64;
    for (key, acct) in s.ledger().accounts() {
        if !policy_ids.contains(&acct.policy_id) {
            continue;
        }
        total += 1;
        if listed.len() < keys_max {
            listed.push(pb::KeyImpact {
                key: key.clone(),
                outstanding: acct.outstanding,
                leases: acct.leases,
                holders: acct.holders.keys().take(holders_max).cloned().collect(),
                holders_total: acct.holders.len() as u64,
            });
        }
    }
    (listed, total)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::Machine;
    use crate::state::StateCommand;
    use leasehold_common::ledger::{Acquire, Command, LedgerConfig};
    use leasehold_common::time::Nanos;

    const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100, per: 1s}\nburst: 200\nlease: {ttl: 5s, reserve_fraction: 0}\n";

    fn state_with_keys(keys: usize, holders: usize) -> AllocatorState {
        let mut s = AllocatorState::new(LedgerConfig::root("g"));
        let apply = StateCommand::ApplyPolicy {
            yaml: POLICY.into(),
            shadow: false,
            effective_at_ns: 0,
            actor: "admin/ops".into(),
        };
        s.apply(Nanos(1), apply);
        for k in 0..keys {
            for h in 0..holders {
                let cmd = Command::Acquire(Acquire {
                    holder_id: format!("gw-{h:02}"),
                    policy_id: "api".into(),
                    key: format!("api:tenant=t{k:03}"),
                    want_credit: 2,
                    demand_milli_per_sec: 0,
                    request_id: 1,
                    priority: 0,
                });
                s.apply(Nanos(1), StateCommand::Ledger(cmd));
            }
        }
        s
    }

    fn diff_request(yaml: &str) -> (pb::DiffPolicyRequest, Policy) {
        let req = pb::DiffPolicyRequest {
            policy_id: "api".into(),
            yaml: yaml.into(),
            ..Default::default()
        };
        (req, Policy::from_yaml(yaml).unwrap())
    }

    #[test]
    fn a_diff_lists_the_keys_it_affects_bounded() {
        let s = state_with_keys(DIFF_KEYS_MAX + 5, DIFF_HOLDERS_PER_KEY_MAX + 2);
        let (req, faster) = diff_request(&POLICY.replace("units: 100", "units: 300"));
        let out = diff_view(&s, &req, Some(&faster)).unwrap();
        assert!(out.diff.contains("rate.units: 100 -> 300"), "{}", out.diff);
        assert_eq!(out.affected_keys_total, (DIFF_KEYS_MAX + 5) as u64);
        assert_eq!(out.affected_keys.len(), DIFF_KEYS_MAX);
        let first = &out.affected_keys[0];
        assert_eq!(first.key, "api:tenant=t000");
        assert_eq!(first.holders.len(), DIFF_HOLDERS_PER_KEY_MAX);
        assert_eq!(first.holders_total, (DIFF_HOLDERS_PER_KEY_MAX + 2) as u64);
        assert_eq!(first.holders[0], "gw-00");
        let acct = s.ledger().account("api:tenant=t000").unwrap();
        assert_eq!(
            (first.outstanding, first.leases),
            (acct.outstanding, acct.leases)
        );
        assert!(first.outstanding > 0 && first.leases > 0, "{first:?}");
    }

    #[test]
    fn an_identical_text_affects_no_keys() {
        let s = state_with_keys(3, 1);
        let (req, same) = diff_request(POLICY);
        let out = diff_view(&s, &req, Some(&same)).unwrap();
        assert!(out.diff.is_empty());
        assert_eq!((out.affected_keys.len(), out.affected_keys_total), (0, 0));
    }
}
