//! Server side of Raft replication: the `RaftService` gRPC API forwarding to `openraft::Raft`.

use leasehold_proto::leasehold::v1::raft_service_server::RaftService;
use leasehold_proto::leasehold::v1::RaftBytes;
use openraft::Raft;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};

use super::types::TypeConfig;

/// Answers peers' Raft RPCs with the local Raft node.
pub struct RaftRpcService {
    raft: Raft<TypeConfig>,
}

impl RaftRpcService {
    /// Serves `raft`.
    pub fn new(raft: Raft<TypeConfig>) -> Self {
        Self { raft }
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
        let rpc = decode("append-entries", request)?;
        encode("append-entries", &self.raft.append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let rpc = decode("vote", request)?;
        encode("vote", &self.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftBytes>,
    ) -> Result<Response<RaftBytes>, Status> {
        let rpc = decode("install-snapshot", request)?;
        encode("install-snapshot", &self.raft.install_snapshot(rpc).await)
    }
}
