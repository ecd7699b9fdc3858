//! The admin service's budget calls: show the tree, set a rate, split by weight, rebalance
//! by demand.

use super::AdminServer;
use crate::replica::Replica;
use crate::service::budget::{budget_tree, rebalance, window_usage};
use crate::service::convert::admin_status;
use crate::state::{AllocatorState, StateCommand};
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeMap;
use tonic::Status;

impl<R: Replica<AllocatorState>> AdminServer<R> {
    /// `ShowBudget`: a leased policy's tree (this grantor and its holders, of one key if
    /// asked), with the policy version it reflects.
    pub(super) async fn show_budget_call(
        &self,
        r: pb::ShowBudgetRequest,
    ) -> Result<pb::ShowBudgetResponse, Status> {
        let id = r.policy_id.clone();
        let out = self
            .read(move |s| {
                budget_tree(s, &r.policy_id, &r.key).map(|root| {
                    (
                        root,
                        s.ledger().policy(&r.policy_id).map_or(0, |p| p.version),
                        window_usage(s, &r.policy_id, &r.key),
                    )
                })
            })
            .await?;
        let (root, policy_version, (windows, windows_truncated)) = out.ok_or_else(|| {
            Status::not_found(format!("no leased policy '{id}' on this allocator"))
        })?;
        Ok(pb::ShowBudgetResponse {
            root: Some(root),
            window_ms: 0,
            policy_version,
            windows,
            windows_truncated,
        })
    }

    /// `SetBudget`: previews the rate change, then (unless a dry run) commits it.
    pub(super) async fn set_budget_call(
        &self,
        actor: String,
        r: pb::SetBudgetRequest,
    ) -> Result<pb::SetBudgetResponse, Status> {
        if r.rate_milli_per_sec == 0 || r.burst == 0 {
            return Err(Status::invalid_argument(format!(
                "rate_milli_per_sec {} / burst {}: both must be positive",
                r.rate_milli_per_sec, r.burst
            )));
        }
        let (id, rate, burst) = (r.policy_id.clone(), r.rate_milli_per_sec, r.burst);
        let preview = self
            .read(move |s| s.preview_set_rate(&id, rate, burst))
            .await?
            .map_err(|e| admin_status(&e))?;
        let mut resp = pb::SetBudgetResponse {
            policy_version: preview.version,
            diff: preview.diff,
            old_rate_milli_per_sec: preview.old_rate_milli_per_sec,
            old_burst: preview.old_burst,
            new_rate_milli_per_sec: preview.new_rate_milli_per_sec,
            new_burst: preview.new_burst,
            changed: preview.changed,
            dry_run: r.dry_run,
        };
        if r.dry_run {
            return Ok(resp);
        }
        let cmd = StateCommand::SetRate {
            policy_id: r.policy_id,
            rate_milli_per_sec: r.rate_milli_per_sec,
            burst: r.burst,
            actor,
        };
        // The committed answer wins over the preview: another change may have come between.
        let (_, policy_version, changed, diff) = self.policy_change(cmd).await?;
        resp.policy_version = policy_version;
        resp.changed = changed;
        resp.diff = diff;
        Ok(resp)
    }

    /// `SplitBudget`: checks the shares, commits them unless a dry run, and answers each
    /// child's share of the rate.
    pub(super) async fn split_budget_call(
        &self,
        actor: String,
        r: pb::SplitBudgetRequest,
    ) -> Result<pb::SplitBudgetResponse, Status> {
        let mut weights = BTreeMap::new();
        for c in &r.children {
            if c.name.is_empty() || c.weight == 0 {
                return Err(Status::invalid_argument(format!(
                    "child '{}': needs a name and a positive weight",
                    c.name
                )));
            }
            if weights
                .insert(c.name.clone(), u64::from(c.weight))
                .is_some()
            {
                return Err(Status::invalid_argument(format!(
                    "child '{}' named twice",
                    c.name
                )));
            }
        }
        let reserve_ppm = (r.reserve_ppm > 0).then_some(u64::from(r.reserve_ppm));
        if !r.dry_run {
            let cmd = StateCommand::SplitBudget {
                policy_id: r.policy_id.clone(),
                weights: weights.clone(),
                reserve_ppm,
                actor,
            };
            self.propose(cmd).await?;
        }
        let id = r.policy_id.clone();
        let (rate_milli, version) = self
            .read(move |s| {
                s.ledger()
                    .policy(&id)
                    .map(|p| (u128::from(p.rate.milli_per_sec()), p.version))
            })
            .await?
            .ok_or_else(|| Status::not_found(format!("no leased policy '{}'", r.policy_id)))?;
        let children = crate::service::views::split_children(&weights, rate_milli, r.reserve_ppm);
        Ok(pb::SplitBudgetResponse {
            policy_version: version,
            diff: String::new(),
            children,
        })
    }

    /// `RebalanceBudget`: weights by measured demand, committed unless a dry run.
    pub(super) async fn rebalance_budget_call(
        &self,
        actor: String,
        r: pb::RebalanceBudgetRequest,
    ) -> Result<pb::RebalanceBudgetResponse, Status> {
        let id = r.policy_id.clone();
        let (weights, changes) = self
            .read(move |s| rebalance(s, &id))
            .await?
            .ok_or_else(|| Status::not_found(format!("no leased policy '{}'", r.policy_id)))?;
        if !r.dry_run && !weights.is_empty() {
            let cmd = StateCommand::SplitBudget {
                policy_id: r.policy_id,
                weights,
                reserve_ppm: None,
                actor,
            };
            self.propose(cmd).await?;
        }
        Ok(pb::RebalanceBudgetResponse { changes })
    }
}
