//! The node's gRPC endpoint: Raft RPCs (for allocator certificates only) and whatever
//! services the node's hooks add, served on any stream of connections.

use leasehold_proto::leasehold::v1::raft_service_server::RaftServiceServer;
use leasehold_proto::transport::{
    cluster_member_id, tls_established, AuthMode, PeerIdentity, Role,
};
use openraft::Raft;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::Connected;

use super::campaign::Contact;
use super::config::{NodeConfig, NodeError};
use super::network::TransportConfig;
use super::node::ServiceHook;
use super::service::RaftRpcService;
use super::types::TypeConfig;

/// Streams a client may reset before this server has accepted them, per connection, before
/// the connection is closed with `GOAWAY(ENHANCE_YOUR_CALM)` (h2's guard against rapid
/// resets; its default is 20). A peer continued after SIGSTOP, or starved of CPU, finds up
/// to [`PEER_CALLS_IN_FLIGHT_MAX`](super::peer_calls::PEER_CALLS_IN_FLIGHT_MAX) timed-out
/// calls from each other node waiting at once; every caller is authenticated by mutual TLS.
pub const PENDING_ACCEPT_RESETS_MAX: usize = 256;

/// Calls open at once on one connection (tonic sets no bound of its own): far more than a
/// region's or an agent's connection carries (its calls are bounded by the client's own
/// in-flight limits), while a client opening streams without end is refused past it.
pub const STREAMS_PER_CONNECTION_MAX: u32 = 1_024;

/// Serves the Raft endpoint on the connections of `incoming` until `stop` turns true.
pub(super) fn serve<S, IO, IE>(
    config: &NodeConfig,
    transport: &TransportConfig,
    (services, raft_auth, raft_cluster): (Option<ServiceHook>, Option<AuthMode>, Option<String>),
    (raft, contact): (Raft<TypeConfig>, std::sync::Arc<Contact>),
    incoming: S,
    mut stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, NodeError>
where
    S: Stream<Item = Result<IO, IE>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: leasehold_proto::transport::PeerOf,
    IE: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let max = transport.message_len_max_bytes;
    // Only members of this cluster may replicate, vote or install snapshots: any other
    // allocator of the deployment could otherwise inflate terms or append entries.
    let metrics = raft.metrics();
    let gate = move |req: tonic::Request<()>| {
        let Some(auth) = &raft_auth else {
            return Ok(req);
        };
        let caller = auth.authorize(&req, &[Role::Allocator])?;
        if let (AuthMode::MutualTls, Some(cluster)) = (auth, &raft_cluster) {
            check_member(&caller, cluster, &metrics.borrow())?;
        }
        Ok(req)
    };
    let service = InterceptedService::new(
        RaftServiceServer::new(RaftRpcService::new(raft, contact))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max),
        gate,
    );
    let mut server = tonic::transport::Server::builder()
        .http2_max_pending_accept_reset_streams(Some(PENDING_ACCEPT_RESETS_MAX))
        .max_concurrent_streams(STREAMS_PER_CONNECTION_MAX);
    let tls = transport.server_tls.clone();
    let tls_limits = transport.tls_limits;
    let node_id = config.node_id;
    let mut router = server.add_service(service);
    if let Some(add) = services {
        router = add(router);
    }
    Ok(tokio::spawn(async move {
        let signal = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        // TLS is established here rather than by tonic, which would start a handshake for
        // every connection and let silent clients hold every slot.
        let served = match tls {
            Some(tls) => {
                let established = tls_established(incoming, tls, tls_limits);
                router
                    .serve_with_incoming_shutdown(established, signal)
                    .await
            }
            None => router.serve_with_incoming_shutdown(incoming, signal).await,
        };
        if let Err(e) = served {
            tracing::error!(node_id, error = %e, "raft endpoint failed");
        }
    }))
}

/// PERMISSION_DENIED unless `caller` is a node of `cluster` in the membership `m` holds
/// (any node of the cluster while this node knows no membership yet: it is joining). A
/// certificate the cluster's nodes share (`<cluster>`) names no node, so it is heard as
/// any member: per-node certificates are what keeps removed nodes out.
fn check_member(
    caller: &PeerIdentity,
    cluster: &str,
    m: &openraft::RaftMetrics<u64, super::types::NodeAddr>,
) -> Result<(), tonic::Status> {
    if caller.name == cluster {
        return Ok(());
    }
    let Some(id) = cluster_member_id(caller, cluster) else {
        return Err(tonic::Status::permission_denied(format!(
            "`{caller}` is not a node of cluster `{cluster}` (its nodes are named `{cluster}-<node id>` or share `{cluster}`)"
        )));
    };
    let membership = m.membership_config.membership();
    let knows_members = membership.nodes().next().is_some();
    if knows_members && membership.get_node(&id).is_none() {
        return Err(tonic::Status::permission_denied(format!(
            "`{caller}` is not a member of cluster `{cluster}`"
        )));
    }
    Ok(())
}
