//! Server side of Raft replication: the `RaftService` gRPC API forwarding to `openraft::Raft`.

use std::sync::Arc;

use leasehold_proto::leasehold::v1::raft_service_server::RaftService;
use leasehold_proto::leasehold::v1::RaftBytes;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest};
use openraft::Raft;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};

use super::campaign::Contact;
use super::types::TypeConfig;

/// Answers peers' Raft RPCs with the local Raft node.
pub struct RaftRpcService {
    raft: Raft<TypeConfig>,
    /// Touched by every call that shows a leader or candidate alive and accepted, so this
    /// node does not campaign against it.
    contact: Arc<Contact>,
}

impl RaftRpcService {
    /// Serves `raft`.
    pub(crate) fn new(raft: Raft<TypeConfig>, contact: Arc<Contact>) -> Self {
        Self { raft, contact }
    }
}

fn decode<T: DeserializeOwned>(what: &str, request: Request<RaftBytes>) -> Result<T, Status> {
    let data = request.into_inner().data;
    postcard::from_bytes(&data).map_err(|e| {
        Status::invalid_argument(format!(
            "{what} request of {} bytes is not a postcard-encoded openraft message: {e}",
            data.len()
        ))
    })
}

/// Raft's own errors travel inside the answer, so the caller can tell them from transport
/// failures.
fn encode<T: Serialize>(what: &str, answer: &T) -> Result<Response<RaftBytes>, Status> {
    postcard::to_allocvec(answer)
        .map(|data| Response::new(RaftBytes { data }))
        .map_err(|e| Status::internal(format!("{what} answer could not be encoded: {e}")))
}

#[tonic::async_trait]
impl RaftService for RaftRpcService {
    async fn append_entries(
        &self,
        request: Request<RaftBytes>,
    ) -> Result<Response<RaftBytes>, Status> {
        let rpc: AppendEntriesRequest<TypeConfig> = decode("append-entries", request)?;
        let answer = self.raft.append_entries(rpc).await;
        // Only a sender with a lower vote than this node's is refused outright.
        if matches!(&answer, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
            self.contact.touch();
        }
        encode("append-entries", &answer)
    }

    async fn vote(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let rpc = decode("vote", request)?;
        let answer = self.raft.vote(rpc).await;
        if matches!(&answer, Ok(r) if r.vote_granted) {
            self.contact.touch();
        }
        encode("vote", &answer)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftBytes>,
    ) -> Result<Response<RaftBytes>, Status> {
        let rpc: InstallSnapshotRequest<TypeConfig> = decode("install-snapshot", request)?;
        let sender = rpc.vote;
        let answer = self.raft.install_snapshot(rpc).await;
        // Accepted when this node's vote is the sender's (not a higher one).
        if matches!(&answer, Ok(r) if r.vote == sender) {
            self.contact.touch();
        }
        encode("install-snapshot", &answer)
    }
}
