//! The admin service: policies, budgets, leases, membership, emergencies, audit.
//! Only admin certificates may call it; every change is audited under the caller's name.

use super::auth::admin_caller;
use super::budget::budget_tree;
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
use std::sync::Arc;
use tonic::{Request, Response, Status};

#[path = "admin_budget.rs"]
mod budget_calls;

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

    async fn policy_change(
        &self,
        cmd: StateCommand,
    ) -> Result<(String, u64, bool, String), Status> {
        match self.propose(cmd).await? {
            StateOutput::Policy {
                policy_id,
                version,
                changed,
                diff,
            } => Ok((policy_id, version, changed, diff)),
            other => Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
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
    })
}

#[tonic::async_trait]
impl<R: Replica<AllocatorState>> AdminService for AdminServer<R> {
    async fn apply_policy(
        &self,
        req: Request<pb::ApplyPolicyRequest>,
    ) -> Result<Response<pb::ApplyPolicyResponse>, Status> {
        let actor = admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        let effective_at_ns = r.effective_at_ms.saturating_mul(1_000_000);
        if r.dry_run {
            let policy = admin_prepare(&r.yaml, r.shadow).map_err(|e| admin_status(&e))?;
            let id = policy.id.clone();
            let (version, changed, diff) = self.read(move |s| s.preview(&policy)).await?;
            return Ok(Response::new(pb::ApplyPolicyResponse {
                policy_id: id,
                version,
                diff,
                changed,
            }));
        }
        let cmd = StateCommand::ApplyPolicy {
            yaml: r.yaml,
            shadow: r.shadow,
            effective_at_ns,
            actor,
        };
        let (policy_id, version, changed, diff) = self.policy_change(cmd).await?;
        Ok(Response::new(pb::ApplyPolicyResponse {
            policy_id,
            version,
            diff,
            changed,
        }))
    }

    async fn list_policies(
        &self,
        req: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        let limit = if r.limit == 0 {
            100
        } else {
            r.limit.min(1_000)
        } as usize;
        let policies = self
            .read(move |s| {
                s.policies()
                    .current()
                    .filter(|v| v.policy.id > r.after_policy_id)
                    .take(limit)
                    .filter_map(|v| summary(s, &v.policy.id))
                    .collect::<Vec<_>>()
            })
            .await?;
        let next = if policies.len() == limit {
            policies
                .last()
                .map(|p| p.policy_id.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListPoliciesResponse {
            policies,
            next_after_policy_id: next,
        }))
    }

    async fn get_policy(
        &self,
        req: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        let id = r.policy_id.clone();
        let found = self
            .read(move |s| {
                let version = if r.version == 0 {
                    s.policies().get(&r.policy_id)?.version
                } else {
                    r.version
                };
                let shadow = s
                    .shadow_tally(&r.policy_id, version)
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
        Ok(Response::new(pb::GetPolicyResponse {
            policy: Some(policy),
            summary: Some(summary),
            shadow_stats,
        }))
    }

    async fn diff_policy(
        &self,
        req: Request<pb::DiffPolicyRequest>,
    ) -> Result<Response<pb::DiffPolicyResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        let candidate = if r.yaml.is_empty() {
            None
        } else {
            Some(admin_prepare(&r.yaml, false).map_err(|e| admin_status(&e))?)
        };
        let out = self
            .read(move |s| super::views::diff_view(s, &r, candidate.as_ref()))
            .await??;
        Ok(Response::new(out))
    }

    async fn rollback_policy(
        &self,
        req: Request<pb::RollbackPolicyRequest>,
    ) -> Result<Response<pb::RollbackPolicyResponse>, Status> {
        let actor = admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        if r.dry_run {
            let (id, to) = (r.policy_id.clone(), r.to_version);
            let preview = self
                .read(move |s| {
                    s.policies()
                        .get_version(&id, to)
                        .map(|v| s.preview(&v.policy))
                        .map_err(|e| Status::not_found(e.to_string()))
                })
                .await??;
            return Ok(Response::new(pb::RollbackPolicyResponse {
                version: preview.0,
                diff: preview.2,
            }));
        }
        let cmd = StateCommand::RollbackPolicy {
            policy_id: r.policy_id,
            to_version: r.to_version,
            actor,
        };
        let (_, version, _, diff) = self.policy_change(cmd).await?;
        Ok(Response::new(pb::RollbackPolicyResponse { version, diff }))
    }

    async fn show_budget(
        &self,
        req: Request<pb::ShowBudgetRequest>,
    ) -> Result<Response<pb::ShowBudgetResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        let id = r.policy_id.clone();
        let out = self
            .read(move |s| {
                budget_tree(s, &r.policy_id, &r.key).map(|root| {
                    (
                        root,
                        s.ledger().policy(&r.policy_id).map_or(0, |p| p.version),
                    )
                })
            })
            .await?;
        let (root, policy_version) = out.ok_or_else(|| {
            Status::not_found(format!("no leased policy '{id}' on this allocator"))
        })?;
        Ok(Response::new(pb::ShowBudgetResponse {
            root: Some(root),
            window_ms: 0,
            policy_version,
        }))
    }

    async fn set_budget(
        &self,
        req: Request<pb::SetBudgetRequest>,
    ) -> Result<Response<pb::SetBudgetResponse>, Status> {
        let actor = admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        self.set_budget_call(actor, r).await.map(Response::new)
    }

    async fn split_budget(
        &self,
        req: Request<pb::SplitBudgetRequest>,
    ) -> Result<Response<pb::SplitBudgetResponse>, Status> {
        let actor = admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        self.split_budget_call(actor, r).await.map(Response::new)
    }

    async fn rebalance_budget(
        &self,
        req: Request<pb::RebalanceBudgetRequest>,
    ) -> Result<Response<pb::RebalanceBudgetResponse>, Status> {
        let actor = admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        self.rebalance_budget_call(actor, r)
            .await
            .map(Response::new)
    }

    async fn list_leases(
        &self,
        req: Request<pb::ListLeasesRequest>,
    ) -> Result<Response<pb::ListLeasesResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        let limit = if r.limit == 0 {
            100
        } else {
            r.limit.min(1_000)
        } as usize;
        let leases = self
            .read(move |s| {
                s.ledger()
                    .leases()
                    .filter(|l| l.lease.lease_id > r.after_lease_id)
                    .filter(|l| r.holder_id.is_empty() || l.lease.holder_id == r.holder_id)
                    .filter(|l| r.policy_id.is_empty() || l.lease.policy_id == r.policy_id)
                    .take(limit)
                    .map(|l| pb::LeaseState {
                        lease: Some(lease_to_pb(&l.lease)),
                        used: l.used,
                        expires_at_ns: l.lease.grantor_expiry_ns(),
                        last_report_at_ns: 0,
                    })
                    .collect::<Vec<_>>()
            })
            .await?;
        let next = if leases.len() == limit {
            leases
                .last()
                .and_then(|l| l.lease.as_ref())
                .map_or(0, |l| l.lease_id)
        } else {
            0
        };
        Ok(Response::new(pb::ListLeasesResponse {
            leases,
            next_after_lease_id: next,
        }))
    }

    async fn revoke_lease(
        &self,
        req: Request<pb::RevokeLeaseRequest>,
    ) -> Result<Response<pb::RevokeLeaseResponse>, Status> {
        let actor = admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        match self
            .propose(StateCommand::Revoke {
                lease_id: r.lease_id,
                reason: r.reason,
                actor,
            })
            .await?
        {
            StateOutput::Revoked { outstanding } => {
                Ok(Response::new(pb::RevokeLeaseResponse { outstanding }))
            }
            other => Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
    }

    async fn cluster_status(
        &self,
        req: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        self.cluster.status().await.map(Response::new)
    }

    async fn add_learner(
        &self,
        req: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        self.cluster
            .add_learner(r.node_id, r.addr)
            .await
            .map(Response::new)
    }

    async fn promote_voter(
        &self,
        req: Request<pb::PromoteVoterRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        self.cluster
            .promote(req.into_inner().node_id)
            .await
            .map(Response::new)
    }

    async fn remove_node(
        &self,
        req: Request<pb::RemoveNodeRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        admin_caller(&self.auth, &req)?;
        self.cluster
            .remove(req.into_inner().node_id)
            .await
            .map(Response::new)
    }

    async fn set_emergency(
        &self,
        req: Request<pb::SetEmergencyRequest>,
    ) -> Result<Response<pb::SetEmergencyResponse>, Status> {
        let actor = admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        let switch = r
            .emergency
            .ok_or_else(|| Status::invalid_argument("emergency: required"))?;
        let emergency = emergency_from_pb(&switch)?;
        match self
            .propose(StateCommand::SetEmergency {
                emergency,
                reason: r.reason,
                actor,
            })
            .await?
        {
            StateOutput::Emergency {
                previous,
                watch_seq,
            } => Ok(Response::new(pb::SetEmergencyResponse {
                previous: Some(emergency_to_pb(&previous)),
                watch_seq,
            })),
            other => Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
    }

    type TailAuditStream = tokio_stream::wrappers::ReceiverStream<Result<pb::AuditEntry, Status>>;

    async fn tail_audit(
        &self,
        req: Request<pb::TailAuditRequest>,
    ) -> Result<Response<Self::TailAuditStream>, Status> {
        admin_caller(&self.auth, &req)?;
        let r = req.into_inner();
        // Fails the call itself (not the stream) on a follower, so clients can follow the
        // leader hint before any entry is sent.
        self.read(|_| ()).await?;
        Ok(Response::new(super::audit_stream::tail(
            self.replica.clone(),
            r,
        )))
    }
}
