//! Membership operations of a Raft node, for the admin service.

use super::cluster::{BoxFuture, ClusterControl};
use crate::raft::RaftNode;
use crate::replica::LateReplica;
use crate::state::AllocatorState;
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeSet;
use tonic::Status;

/// The admin service's view of the Raft node it runs on.
pub struct RaftCluster {
    pub node: LateReplica<RaftNode<AllocatorState>>,
    pub cluster_id: String,
    pub level: String,
}

impl RaftCluster {
    fn node(&self) -> Result<&RaftNode<AllocatorState>, Status> {
        self.node
            .get()
            .ok_or_else(|| Status::unavailable("node is starting"))
    }

    fn members(&self) -> Result<Vec<pb::ClusterMember>, Status> {
        let m = self.node()?.metrics();
        let member = |(id, addr): (&u64, &String), role: pb::MemberRole| pb::ClusterMember {
            node_id: *id,
            addr: addr.clone(),
            role: role as i32,
            // Replication progress per peer is only known to the leader; membership alone
            // says the node is configured, not that it answers.
            healthy: m.leader_id.is_some(),
            matched_index: 0,
            last_contact_age_ms: 0,
        };
        Ok(m.voters
            .iter()
            .map(|e| member(e, pb::MemberRole::Voter))
            .chain(
                m.learners
                    .iter()
                    .map(|e| member(e, pb::MemberRole::Learner)),
            )
            .collect())
    }

    async fn change(&self, voters: BTreeSet<u64>) -> Result<pb::MembershipResponse, Status> {
        self.node()?
            .change_membership(voters, false)
            .await
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let m = self.node()?.metrics();
        Ok(pb::MembershipResponse {
            log_index: m.last_log_index.unwrap_or(0),
            members: self.members()?,
        })
    }
}

impl ClusterControl for RaftCluster {
    fn status(&self) -> BoxFuture<'_, Result<pb::ClusterStatusResponse, Status>> {
        Box::pin(async move {
            let m = self.node()?.metrics();
            Ok(pb::ClusterStatusResponse {
                cluster_id: self.cluster_id.clone(),
                level: self.level.clone(),
                node_id: m.node_id,
                leader_id: m.leader_id.unwrap_or(0),
                term: m.current_term,
                last_log_index: m.last_log_index.unwrap_or(0),
                committed_index: m.last_applied_index.unwrap_or(0),
                members: self.members()?,
            })
        })
    }

    fn add_learner(
        &self,
        node_id: u64,
        addr: String,
    ) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>> {
        Box::pin(async move {
            self.node()?
                .add_learner(node_id, addr, true)
                .await
                .map_err(|e| Status::failed_precondition(e.to_string()))?;
            let m = self.node()?.metrics();
            Ok(pb::MembershipResponse {
                log_index: m.last_log_index.unwrap_or(0),
                members: self.members()?,
            })
        })
    }

    fn promote(&self, node_id: u64) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>> {
        Box::pin(async move {
            let mut voters: BTreeSet<u64> = self.node()?.metrics().voters.keys().copied().collect();
            voters.insert(node_id);
            self.change(voters).await
        })
    }

    fn remove(&self, node_id: u64) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>> {
        Box::pin(async move {
            let mut voters: BTreeSet<u64> = self.node()?.metrics().voters.keys().copied().collect();
            if !voters.remove(&node_id) {
                return Err(Status::not_found(format!("node {node_id} is not a voter")));
            }
            self.change(voters).await
        })
    }
}
