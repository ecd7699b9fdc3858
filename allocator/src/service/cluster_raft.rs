//! Membership operations of a Raft node, for the admin service.

use super::cluster::{BoxFuture, ClusterControl};
use crate::raft::RaftNode;
use crate::replica::LateReplica;
use crate::state::AllocatorState;
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeSet;
use tonic::Status;

/// A peer the leader has not seen replicate for longer than this is reported unhealthy
/// (the leader appends a tick every 100 ms by default, so a healthy peer's age stays small).
pub const PEER_CONTACT_AGE_MAX_MS: u64 = 2_000;

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
        let leading = m.leader_id == Some(m.node_id);
        let member = |(id, addr): (&u64, &String), role: pb::MemberRole| {
            let (healthy, matched_index, last_contact_age_ms) = if *id == m.node_id {
                (m.leader_id.is_some(), m.last_log_index.unwrap_or(0), 0)
            } else if leading {
                let p = m.peers.get(id);
                let age = p.and_then(|p| p.contact_age_ms);
                (
                    age.is_some_and(|a| a <= PEER_CONTACT_AGE_MAX_MS),
                    p.and_then(|p| p.matched_index).unwrap_or(0),
                    age.unwrap_or(u64::MAX),
                )
            } else {
                // Only the leader sees replication; a follower can vouch for a peer only
                // to the extent that a leader is known. Ask the leader for the real figures.
                (m.leader_id.is_some(), 0, 0)
            };
            pb::ClusterMember {
                node_id: *id,
                addr: addr.clone(),
                role: role as i32,
                healthy,
                matched_index,
                last_contact_age_ms,
            }
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
        self.membership()
    }

    /// The membership as it stands after a change.
    fn membership(&self) -> Result<pb::MembershipResponse, Status> {
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
            // Only the leader sees replication: a follower that knows the leader sends the
            // caller there (leasectl follows), rather than vouch for peers it cannot see.
            // With no leader known, it answers with what it knows itself.
            if let Some(leader) = m.leader_id.filter(|l| *l != m.node_id) {
                return Err(crate::service::convert::replica_status(
                    crate::replica::ReplicaError::NotLeader {
                        leader_id: Some(leader),
                        leader_addr: m.leader_addr.clone(),
                    },
                ));
            }
            Ok(pb::ClusterStatusResponse {
                cluster_id: self.cluster_id.clone(),
                level: self.level.clone(),
                node_id: m.node_id,
                leader_id: m.leader_id.unwrap_or(0),
                term: m.current_term,
                last_log_index: m.last_log_index.unwrap_or(0),
                committed_index: m.last_applied_index.unwrap_or(0),
                members: self.members()?,
                snapshot_index: m.snapshot_index.unwrap_or(0),
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
            self.membership()
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
