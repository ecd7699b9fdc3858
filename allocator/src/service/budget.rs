//! Budget trees for `leasectl budget show`, and re-weighting by demand.

use crate::state::AllocatorState;
use leasehold_common::ledger::sizing::demand_per_horizon;
use leasehold_common::ledger::Supply;
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeMap;

fn ppm(part: u64, whole: u64) -> u32 {
    if whole == 0 {
        return 0;
    }
    (u128::from(part) * 1_000_000 / u128::from(whole)).min(1_000_000) as u32
}

/// This grantor as the root of the tree, with one child per holder of the policy (or of
/// one key). Utilisation is used ÷ granted: how much leased credit was actually spent.
pub fn budget_tree(state: &AllocatorState, policy_id: &str, key: &str) -> Option<pb::BudgetNode> {
    let ledger = state.ledger();
    let params = ledger.policy(policy_id)?;
    let rate_milli = params.rate.milli_per_sec();
    let level = ledger.config().level.name();
    let budget = ledger.budget(policy_id);
    let mut root = pb::BudgetNode {
        level: level.into(),
        name: ledger.config().grantor_id.clone(),
        rate_milli_per_sec: rate_milli,
        burst: params.burst,
        reserve_ppm: u32::try_from(
            budget
                .and_then(|b| b.reserve_ppm)
                .unwrap_or(params.lease.reserve_ppm),
        )
        .unwrap_or(u32::MAX),
        ..Default::default()
    };
    let mut holders: BTreeMap<String, pb::BudgetNode> = BTreeMap::new();
    for (k, acct) in ledger.accounts() {
        if acct.policy_id != policy_id || (!key.is_empty() && k != key) {
            continue;
        }
        root.granted += acct.stats.granted;
        root.outstanding += acct.outstanding;
        root.used += acct.stats.used;
        if let Supply::Upstream(u) = &acct.supply {
            root.burst = root.burst.max(u.credit_known);
        }
    }
    for rec in ledger.leases() {
        if rec.lease.policy_id != policy_id || (!key.is_empty() && rec.lease.key != key) {
            continue;
        }
        let weight = budget
            .and_then(|b| b.weights.get(&rec.lease.holder_id))
            .copied()
            .unwrap_or(1);
        let node = holders
            .entry(rec.lease.holder_id.clone())
            .or_insert_with(|| pb::BudgetNode {
                level: "holder".into(),
                name: rec.lease.holder_id.clone(),
                weight: u32::try_from(weight).unwrap_or(u32::MAX),
                ..Default::default()
            });
        node.granted += rec.lease.credit;
        node.outstanding += rec.unspent();
        node.used += rec.used;
    }
    for node in holders.values_mut() {
        node.utilisation_ppm = ppm(node.used, node.granted);
    }
    root.utilisation_ppm = ppm(root.used, root.granted);
    root.children = holders.into_values().collect();
    Some(root)
}

/// Most keys `budget show` lists with their window usage.
pub const WINDOW_ROWS_MAX: usize = 100;

/// Each window or calendar key of `policy_id` (or only `key`) with its current window's
/// usage, up to [`WINDOW_ROWS_MAX`]; and whether more were left out.
pub fn window_usage(
    state: &AllocatorState,
    policy_id: &str,
    key: &str,
) -> (Vec<pb::WindowUsage>, bool) {
    let ms = |ns: u64| ns / 1_000_000;
    let mut rows = state
        .ledger()
        .accounts()
        .filter(|(k, a)| a.policy_id == policy_id && (key.is_empty() || k.as_str() == key))
        .filter_map(|(k, a)| match &a.supply {
            Supply::Window(w) => Some(pb::WindowUsage {
                key: k.clone(),
                start_ms: ms(w.start.0),
                end_ms: ms(w.end.0),
                limit: w.spec.limit(),
                used: w.consumed(),
                remaining: w.free,
            }),
            _ => None,
        });
    let listed: Vec<_> = rows.by_ref().take(WINDOW_ROWS_MAX).collect();
    let truncated = rows.next().is_some();
    (listed, truncated)
}

/// Weights proportional to each holder's measured demand (at least 1), and the rate share
/// each had before and gets after.
pub fn rebalance(
    state: &AllocatorState,
    policy_id: &str,
) -> Option<(BTreeMap<String, u64>, Vec<pb::BudgetShareChange>)> {
    let ledger = state.ledger();
    let params = ledger.policy(policy_id)?;
    let mut demand: BTreeMap<String, u64> = BTreeMap::new();
    for (_, acct) in ledger.accounts().filter(|(_, a)| a.policy_id == policy_id) {
        for (holder, slot) in &acct.holders {
            *demand.entry(holder.clone()).or_default() +=
                demand_per_horizon(slot.demand_milli_per_sec, 1_000);
        }
    }
    let old = ledger
        .budget(policy_id)
        .map(|b| b.weights.clone())
        .unwrap_or_default();
    let new: BTreeMap<String, u64> = demand
        .iter()
        .map(|(h, d)| (h.clone(), (*d).max(1)))
        .collect();
    let rate_milli = u128::from(params.rate.milli_per_sec());
    let share = |weights: &BTreeMap<String, u64>, h: &str| {
        let total: u128 = demand
            .keys()
            .map(|k| u128::from(*weights.get(k).unwrap_or(&1)))
            .sum();
        let w = u128::from(*weights.get(h).unwrap_or(&1));
        u64::try_from(rate_milli * w / total.max(1)).unwrap_or(u64::MAX)
    };
    let changes = demand
        .keys()
        .map(|h| pb::BudgetShareChange {
            name: h.clone(),
            before_rate_milli_per_sec: share(&old, h),
            after_rate_milli_per_sec: share(&new, h),
        })
        .collect();
    Some((new, changes))
}
