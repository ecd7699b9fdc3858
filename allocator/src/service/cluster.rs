//! Cluster membership as the admin service sees it.

use leasehold_proto::leasehold::v1 as pb;
use std::future::Future;
use std::pin::Pin;
use tonic::Status;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Membership operations of the node the admin service runs on.
pub trait ClusterControl: Send + Sync + 'static {
    fn status(&self) -> BoxFuture<'_, Result<pb::ClusterStatusResponse, Status>>;
    fn add_learner(
        &self,
        node_id: u64,
        addr: String,
    ) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>>;
    fn promote(&self, node_id: u64) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>>;
    fn remove(&self, node_id: u64) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>>;
}

/// A node that is its own cluster (tests, standalone tools): it reports itself and refuses
/// membership changes.
pub struct SingleNode {
    pub cluster_id: String,
    pub level: String,
    pub node_id: u64,
    pub addr: String,
}

impl ClusterControl for SingleNode {
    fn status(&self) -> BoxFuture<'_, Result<pb::ClusterStatusResponse, Status>> {
        Box::pin(async move {
            Ok(pb::ClusterStatusResponse {
                cluster_id: self.cluster_id.clone(),
                level: self.level.clone(),
                node_id: self.node_id,
                leader_id: self.node_id,
                term: 1,
                last_log_index: 0,
                committed_index: 0,
                members: vec![pb::ClusterMember {
                    node_id: self.node_id,
                    addr: self.addr.clone(),
                    role: pb::MemberRole::Voter as i32,
                    healthy: true,
                    matched_index: 0,
                    last_contact_age_ms: 0,
                }],
                snapshot_index: 0,
            })
        })
    }

    fn add_learner(
        &self,
        _: u64,
        _: String,
    ) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>> {
        Box::pin(async {
            Err(Status::failed_precondition(
                "this node runs without Raft; membership is fixed",
            ))
        })
    }

    fn promote(&self, _: u64) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>> {
        Box::pin(async {
            Err(Status::failed_precondition(
                "this node runs without Raft; membership is fixed",
            ))
        })
    }

    fn remove(&self, _: u64) -> BoxFuture<'_, Result<pb::MembershipResponse, Status>> {
        Box::pin(async {
            Err(Status::failed_precondition(
                "this node runs without Raft; membership is fixed",
            ))
        })
    }
}
