//! The admin service: policies, budgets, leases, membership, emergencies, audit.
//! Only admin certificates may call it; every change is audited under the caller's name.

use super::auth::admin_caller;
use super::cluster::ClusterControl;
use super::convert::{
    admin_status, emergency_from_pb, emergency_to_pb, lease_to_pb, replica_status,
};
use super::watch::policy_info;
use crate::replica::Replica;
use crate::state::{admin_prepare, AllocatorState, StateCommand, StateOutput};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_server::AdminService;
use leasehold_proto::transport::AuthMode;
use std::future::Future;
use std::sync::Arc;
use tonic::{Request, Response, Status};

#[path = "admin_backup.rs"]
mod backup_calls;
#[path = "admin_budget.rs"]
mod budget_calls;
#[path = "admin_usage.rs"]
mod usage_calls;

pub struct AdminServer<R> {
    replica: R,
    auth: AuthMode,
    cluster: Arc<dyn ClusterControl>,
}

impl<R: Replica<AllocatorState>> AdminServer<R> {
    pub fn new(replica: R, auth: AuthMode, cluster: Arc<dyn ClusterControl>) -> Self {
        AdminServer {
            replica,
            auth,
            cluster,
        }
    }

    async fn propose(&self, cmd: StateCommand) -> Result<StateOutput, Status> {
        match self.replica.propose(cmd).await.map_err(replica_status)? {
            StateOutput::Refused(e) => Err(admin_status(&e)),
            out => Ok(out),
        }
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&AllocatorState) -> T + Send + 'static,
    ) -> Result<T, Status> {
        self.replica.read(f).await.map_err(replica_status)
    }

    /// Authorises an admin caller, then answers with `call(actor, request)`. Every admin
    /// call starts this way; the actor is who the audit log names for a change.
    async fn serve<Q, A, Fut>(
        &self,
        req: Request<Q>,
        call: impl FnOnce(String, Q) -> Fut,
    ) -> Result<Response<A>, Status>
    where
        Fut: Future<Output = Result<A, Status>>,
    {
        let actor = admin_caller(&self.auth, &req)?;
        call(actor, req.into_inner())
            .await
            .map(Response::new)
            .map_err(super::convert::bounded_status)
    }

    /// Commits `cmd` and picks the answer out of its output; `answer` hands back an output
    /// of another kind, which is an internal error.
    async fn commit<T>(
        &self,
        cmd: StateCommand,
        answer: impl FnOnce(StateOutput) -> Result<T, StateOutput>,
    ) -> Result<T, Status> {
        answer(self.propose(cmd).await?)
            .map_err(|other| Status::internal(format!("unexpected answer {other:?}")))
    }

    async fn policy_change(
        &self,
        cmd: StateCommand,
    ) -> Result<(String, u64, bool, String), Status> {
        self.commit(cmd, |out| match out {
            StateOutput::Policy {
                policy_id,
                version,
                changed,
                diff,
            } => Ok((policy_id, version, changed, diff)),
            other => Err(other),
        })
        .await
    }
}

/// Entries in one page of a list call: 100 unless asked, at most 1 000.
fn page_size(requested: u32) -> usize {
    if requested == 0 {
        100
    } else {
        requested.min(1_000) as usize
    }
}

/// Where the next page starts: after the last entry of a full page; none (the default)
/// after a short one.
fn next_after<T, K: Default>(page: &[T], size: usize, key: impl FnOnce(&T) -> K) -> K {
    match page.last() {
        Some(last) if page.len() == size => key(last),
        _ => K::default(),
    }
}

fn nanos_to_ms(ns: u64) -> u64 {
    ns / 1_000_000
}

fn summary(state: &AllocatorState, id: &str) -> Option<pb::PolicySummary> {
    let v = state.policies().get(id)?;
    let meta = state.meta(id).cloned().unwrap_or_default();
    Some(pb::PolicySummary {
        policy_id: id.to_string(),
        version: v.version,
        shadow: v.policy.mode == leasehold_common::policy::Mode::Shadow,
        kill_switch: v.policy.kill_switch,
        effective_at_ms: nanos_to_ms(meta.effective_at_ns),
        updated_at_ms: nanos_to_ms(meta.updated_at_ns),
        updated_by: meta.updated_by,
        emergency: Some(super::convert::emergency_to_pb(&state.emergency(id))),
    })
}

#[tonic::async_trait]
impl<R: Replica<AllocatorState>> AdminService for AdminServer<R> {
    async fn apply_policy(
        &self,
        req: Request<pb::ApplyPolicyRequest>,
    ) -> Result<Response<pb::ApplyPolicyResponse>, Status> {
        self.serve(req, |actor, r| async move {
            if r.dry_run {
                let policy = admin_prepare(&r.yaml, r.shadow).map_err(|e| admin_status(&e))?;
                let id = policy.id.clone();
                // Refused as the change would be, so a dry run answers what apply would.
                let (version, changed, diff) = self
                    .read(move |s| {
                        s.check_document(&policy)
                            .map(|()| s.preview(&policy))
                            .map_err(|e| admin_status(&e))
                    })
                    .await??;
                return Ok(pb::ApplyPolicyResponse {
                    policy_id: id,
                    version,
                    diff,
                    changed,
                });
            }
            // Parsed and validated here, once: the log carries the document as the policy
            // writes itself (no comments, anchors or nesting beyond the schema's), so a
            // document every replica must parse again can never be hostile or refused.
            let policy = admin_prepare(&r.yaml, r.shadow).map_err(|e| admin_status(&e))?;
            let yaml = policy
                .to_yaml()
                .map_err(|e| Status::internal(format!("writing the policy back: {e}")))?;
            let cmd = StateCommand::ApplyPolicy {
                yaml,
                shadow: r.shadow,
                effective_at_ns: r.effective_at_ms.saturating_mul(1_000_000),
                actor,
            };
            let (policy_id, version, changed, diff) = self.policy_change(cmd).await?;
            Ok(pb::ApplyPolicyResponse {
                policy_id,
                version,
                diff,
                changed,
            })
        })
        .await
    }

    async fn list_policies(
        &self,
        req: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        self.serve(req, |_, r| async move {
            let size = page_size(r.limit);
            let policies = self
                .read(move |s| {
                    s.policies()
                        .current()
                        .filter(|v| v.policy.id > r.after_policy_id)
                        .take(size)
                        .filter_map(|v| summary(s, &v.policy.id))
                        .collect::<Vec<_>>()
                })
                .await?;
            let next_after_policy_id = next_after(&policies, size, |p| p.policy_id.clone());
            Ok(pb::ListPoliciesResponse {
                policies,
                next_after_policy_id,
            })
        })
        .await
    }

    async fn get_policy(
        &self,
        req: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        self.serve(req, |_, r| async move {
            let id = r.policy_id.clone();
            let found = self
                .read(move |s| {
                    let version = if r.version == 0 {
                        s.policies().get(&r.policy_id)?.version
                    } else {
                        r.version
                    };
                    let shadow =
                        s.shadow_tally(&r.policy_id, version)
                            .as_ref()
                            .map(|t| pb::ShadowStats {
                                would_deny_requests: t.would_deny_requests,
                                would_deny_units: 0,
                                since_ms: nanos_to_ms(t.since_ns),
                            });
                    Some((
                        policy_info(s, &r.policy_id, version)?,
                        summary(s, &r.policy_id)?,
                        shadow,
                    ))
                })
                .await?;
            let (policy, summary, shadow_stats) = found.ok_or_else(|| {
                Status::not_found(format!("no policy '{id}' (or no such version kept)"))
            })?;
            Ok(pb::GetPolicyResponse {
                policy: Some(policy),
                summary: Some(summary),
                shadow_stats,
            })
        })
        .await
    }

    async fn diff_policy(
        &self,
        req: Request<pb::DiffPolicyRequest>,
    ) -> Result<Response<pb::DiffPolicyResponse>, Status> {
        self.serve(req, |_, r| async move {
            let candidate = if r.yaml.is_empty() {
                None
            } else {
                Some(admin_prepare(&r.yaml, false).map_err(|e| admin_status(&e))?)
            };
            self.read(move |s| super::views::diff_view(s, &r, candidate.as_ref()))
                .await?
        })
        .await
    }

    async fn rollback_policy(
        &self,
        req: Request<pb::RollbackPolicyRequest>,
    ) -> Result<Response<pb::RollbackPolicyResponse>, Status> {
        self.serve(req, |actor, r| async move {
            if r.dry_run {
                let (id, to) = (r.policy_id.clone(), r.to_version);
                let (version, _, diff) = self
                    .read(move |s| {
                        s.policies()
                            .get_version(&id, to)
                            .map(|v| s.preview(&v.policy))
                            .map_err(|e| Status::not_found(e.to_string()))
                    })
                    .await??;
                return Ok(pb::RollbackPolicyResponse { version, diff });
            }
            let cmd = StateCommand::RollbackPolicy {
                policy_id: r.policy_id,
                to_version: r.to_version,
                actor,
            };
            let (_, version, _, diff) = self.policy_change(cmd).await?;
            Ok(pb::RollbackPolicyResponse { version, diff })
        })
        .await
    }

    async fn show_budget(
        &self,
        req: Request<pb::ShowBudgetRequest>,
    ) -> Result<Response<pb::ShowBudgetResponse>, Status> {
        self.serve(req, |_, r| self.show_budget_call(r)).await
    }

    async fn set_budget(
        &self,
        req: Request<pb::SetBudgetRequest>,
    ) -> Result<Response<pb::SetBudgetResponse>, Status> {
        self.serve(req, |actor, r| self.set_budget_call(actor, r))
            .await
    }

    async fn split_budget(
        &self,
        req: Request<pb::SplitBudgetRequest>,
    ) -> Result<Response<pb::SplitBudgetResponse>, Status> {
        self.serve(req, |actor, r| self.split_budget_call(actor, r))
            .await
    }

    async fn rebalance_budget(
        &self,
        req: Request<pb::RebalanceBudgetRequest>,
    ) -> Result<Response<pb::RebalanceBudgetResponse>, Status> {
        self.serve(req, |actor, r| self.rebalance_budget_call(actor, r))
            .await
    }

    async fn list_leases(
        &self,
        req: Request<pb::ListLeasesRequest>,
    ) -> Result<Response<pb::ListLeasesResponse>, Status> {
        self.serve(req, |_, r| async move {
            let size = page_size(r.limit);
            let leases = self
                .read(move |s| {
                    s.ledger()
                        .leases()
                        .filter(|l| l.lease.lease_id > r.after_lease_id)
                        .filter(|l| r.holder_id.is_empty() || l.lease.holder_id == r.holder_id)
                        .filter(|l| r.policy_id.is_empty() || l.lease.policy_id == r.policy_id)
                        .take(size)
                        .map(|l| pb::LeaseState {
                            lease: Some(lease_to_pb(&l.lease)),
                            used: l.used,
                            expires_at_ns: l.lease.grantor_expiry_ns(),
                            last_report_at_ns: 0,
                        })
                        .collect::<Vec<_>>()
                })
                .await?;
            let next_after_lease_id = next_after(&leases, size, |l| {
                l.lease.as_ref().map_or(0, |l| l.lease_id)
            });
            Ok(pb::ListLeasesResponse {
                leases,
                next_after_lease_id,
            })
        })
        .await
    }

    async fn revoke_lease(
        &self,
        req: Request<pb::RevokeLeaseRequest>,
    ) -> Result<Response<pb::RevokeLeaseResponse>, Status> {
        self.serve(req, |actor, r| {
            let cmd = StateCommand::Revoke {
                lease_id: r.lease_id,
                reason: r.reason,
                actor,
            };
            self.commit(cmd, |out| match out {
                StateOutput::Revoked { outstanding } => Ok(pb::RevokeLeaseResponse { outstanding }),
                other => Err(other),
            })
        })
        .await
    }

    async fn cluster_status(
        &self,
        req: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusResponse>, Status> {
        self.serve(req, |_, _| self.cluster.status()).await
    }

    async fn add_learner(
        &self,
        req: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.serve(req, |_, r| self.cluster.add_learner(r.node_id, r.addr))
            .await
    }

    async fn promote_voter(
        &self,
        req: Request<pb::PromoteVoterRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.serve(req, |_, r| self.cluster.promote(r.node_id))
            .await
    }

    async fn remove_node(
        &self,
        req: Request<pb::RemoveNodeRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.serve(req, |_, r| self.cluster.remove(r.node_id)).await
    }

    async fn set_emergency(
        &self,
        req: Request<pb::SetEmergencyRequest>,
    ) -> Result<Response<pb::SetEmergencyResponse>, Status> {
        self.serve(req, |actor, r| async move {
            let switch = r
                .emergency
                .ok_or_else(|| Status::invalid_argument("emergency: required"))?;
            let cmd = StateCommand::SetEmergency {
                emergency: emergency_from_pb(&switch)?,
                reason: r.reason,
                actor,
            };
            self.commit(cmd, |out| match out {
                StateOutput::Emergency {
                    previous,
                    watch_seq,
                } => Ok(pb::SetEmergencyResponse {
                    previous: Some(emergency_to_pb(&previous)),
                    watch_seq,
                }),
                other => Err(other),
            })
            .await
        })
        .await
    }

    async fn backup(
        &self,
        req: Request<pb::BackupRequest>,
    ) -> Result<Response<pb::BackupResponse>, Status> {
        self.serve(req, |_, _| self.take_backup()).await
    }

    async fn restore(
        &self,
        req: Request<pb::RestoreRequest>,
    ) -> Result<Response<pb::RestoreResponse>, Status> {
        self.serve(req, |actor, r| self.restore_from(actor, r))
            .await
    }

    async fn usage(
        &self,
        req: Request<pb::UsageRequest>,
    ) -> Result<Response<pb::UsageResponse>, Status> {
        self.serve(req, |_, r| self.usage_call(r)).await
    }

    type TailAuditStream = tokio_stream::wrappers::ReceiverStream<Result<pb::AuditEntry, Status>>;

    async fn tail_audit(
        &self,
        req: Request<pb::TailAuditRequest>,
    ) -> Result<Response<Self::TailAuditStream>, Status> {
        self.serve(req, |_, r| async move {
            // Fails the call itself (not the stream) on a follower, so clients can follow
            // the leader hint before any entry is sent.
            self.read(|_| ()).await?;
            Ok(super::audit_stream::tail(self.replica.clone(), r))
        })
        .await
    }
}
