//! Client side of Raft replication: openraft's network traits over the `RaftService` gRPC API.
//!
//! Each message is the postcard encoding of openraft's own request type; each answer is the
//! postcard encoding of `Result<response, RaftError>` (see `leasehold/v1/raft.proto`). One
//! lazily connected tonic `Channel` per peer is cached and shared by every replication stream
//! to that peer; tonic reconnects it when the peer comes back.

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_proto::leasehold::v1::raft_service_client::RaftServiceClient;
use leasehold_proto::leasehold::v1::RaftBytes;
use leasehold_proto::transport::ConnectFn;
use leasehold_proto::transport::{ListenerLimits, RustlsServerConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::campaign::Contact;
use super::peer_calls::PeerCalls;
use super::types::{NodeAddr, TypeConfig};

/// Adjusts every peer endpoint before it connects (keep-alive, proxies, custom TLS, ...).
pub type EndpointHook =
    Arc<dyn Fn(Endpoint) -> Result<Endpoint, tonic::transport::Error> + Send + Sync>;

/// Makes the lazily connected channel to a peer from its fully configured endpoint, over a
/// transport other than the host's TCP stack (an in-process pipe, a simulated network),
/// typically with `Endpoint::connect_with_connector_lazy`.
pub type PeerConnector = Arc<ConnectFn>;

/// How nodes reach each other. Plaintext unless TLS is configured; production clusters set both
/// TLS configs to mutual TLS so only peers holding a cluster certificate can replicate.
#[derive(Clone)]
pub struct TransportConfig {
    /// TLS for outgoing connections; `None` connects over plaintext `http://`.
    pub client_tls: Option<ClientTlsConfig>,
    /// TLS for the node's own endpoint; `None` serves plaintext.
    pub server_tls: Option<Arc<RustlsServerConfig>>,
    /// The listener's bounds, for the TLS handshakes it runs (a quarter of its connections
    /// at once) and the connections it keeps per client certificate.
    pub tls_limits: ListenerLimits,
    /// Applied to each peer endpoint after the settings above.
    pub endpoint_hook: Option<EndpointHook>,
    /// Connects peer channels instead of `Endpoint::connect_lazy` over TCP.
    pub connector: Option<PeerConnector>,
    /// Time allowed to establish a connection, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Largest encoded Raft message sent or accepted, in bytes.
    pub message_len_max_bytes: usize,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            client_tls: None,
            server_tls: None,
            tls_limits: ListenerLimits::default(),
            endpoint_hook: None,
            connector: None,
            connect_timeout_ms: 1_000,
            message_len_max_bytes: 64 * 1024 * 1024,
        }
    }
}

impl std::fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportConfig")
            .field("client_tls", &self.client_tls.is_some())
            .field("server_tls", &self.server_tls.is_some())
            .field("endpoint_hook", &self.endpoint_hook.is_some())
            .field("connector", &self.connector.is_some())
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("message_len_max_bytes", &self.message_len_max_bytes)
            .finish()
    }
}

impl TransportConfig {
    /// The endpoint for a peer at `addr` (`host:port`).
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, tonic::transport::Error> {
        let scheme = if self.client_tls.is_some() {
            "https"
        } else {
            "http"
        };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))?
            .connect_timeout(Duration::from_millis(self.connect_timeout_ms))
            .tcp_nodelay(true);
        if let Some(tls) = &self.client_tls {
            endpoint = endpoint.tls_config(tls.clone())?;
        }
        match &self.endpoint_hook {
            Some(hook) => hook(endpoint),
            None => Ok(endpoint),
        }
    }
}

/// Creates per-peer network clients; shared channels live here.
#[derive(Clone)]
pub struct NetworkFactory {
    node_id: u64,
    transport: TransportConfig,
    channels: Arc<Mutex<HashMap<u64, Peer>>>,
    /// Told when a voter refuses this node's campaign for a longer log.
    contact: Arc<Contact>,
}

/// A peer's address, its shared channel and its calls' shared state.
type Peer = (String, Channel, Arc<PeerCalls>);

impl NetworkFactory {
    /// A factory for the node `node_id`.
    pub fn new(node_id: u64, transport: TransportConfig) -> Self {
        Self {
            node_id,
            transport,
            channels: Arc::new(Mutex::new(HashMap::new())),
            contact: Arc::default(),
        }
    }

    /// What this node's vote calls learn for its campaigner.
    pub(crate) fn contact(&self) -> Arc<Contact> {
        Arc::clone(&self.contact)
    }

    fn channel(
        &self,
        target: u64,
        addr: &str,
    ) -> Result<(Channel, Arc<PeerCalls>), tonic::transport::Error> {
        // Only map lookups happen under the lock; lazy connecting does no I/O.
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((known, channel, calls)) = channels.get(&target) {
            if known == addr {
                return Ok((channel.clone(), Arc::clone(calls)));
            }
        }
        let endpoint = self.transport.endpoint(addr)?;
        let channel = match &self.transport.connector {
            Some(connect) => connect(&endpoint),
            None => endpoint.connect_lazy(),
        };
        let calls = PeerCalls::new(target, addr);
        channels.insert(
            target,
            (addr.to_string(), channel.clone(), Arc::clone(&calls)),
        );
        Ok((channel, calls))
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &NodeAddr) -> PeerClient {
        let client = self.channel(target, &node.addr).map(|(channel, calls)| {
            let max = self.transport.message_len_max_bytes;
            let client = RaftServiceClient::new(channel)
                .max_decoding_message_size(max)
                .max_encoding_message_size(max);
            (client, calls)
        });
        PeerClient {
            node_id: self.node_id,
            target,
            node: node.clone(),
            client: client.map_err(|e| e.to_string()),
            contact: Arc::clone(&self.contact),
        }
    }
}

/// Raft RPCs to one peer.
pub struct PeerClient {
    node_id: u64,
    target: u64,
    node: NodeAddr,
    /// The client and the peer's shared call state, or why the peer's address could not be
    /// turned into an endpoint.
    client: Result<(RaftServiceClient<Channel>, Arc<PeerCalls>), String>,
    contact: Arc<Contact>,
}

type RpcResult<T, E> = Result<T, RPCError<u64, NodeAddr, RaftError<u64, E>>>;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportFailure(String);

impl PeerClient {
    async fn call<Req, Resp, E>(
        &mut self,
        action: RPCTypes,
        req: &Req,
        ttl: Duration,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let (client, calls) = match &self.client {
            Ok((client, calls)) => (client.clone(), Arc::clone(calls)),
            Err(reason) => {
                let failure = TransportFailure(format!(
                    "peer {} address {:?} is unusable: {reason}",
                    self.target, self.node.addr
                ));
                return Err(RPCError::Unreachable(Unreachable::new(&failure)));
            }
        };
        let data = postcard::to_allocvec(req).map_err(|e| network_error(&e))?;
        // No `grpc-timeout`: tonic enforces it on the client too, by resetting the stream,
        // which is what detaching the call avoids (see `peer_calls`).
        let request = tonic::Request::new(RaftBytes { data });
        let timeout = Timeout {
            action,
            id: self.node_id,
            target: self.target,
            timeout: ttl,
        };
        let reply = tokio::time::timeout(ttl, calls.detached(ttl, send(client, action, request)))
            .await
            .map_err(|_| RPCError::Timeout(timeout))?
            .ok_or_else(|| {
                let failure = TransportFailure(format!("peer {} is not answering", self.target));
                RPCError::Unreachable(Unreachable::new(&failure))
            })?
            .map_err(|status| status_error(&status))?;
        let answer: Result<Resp, RaftError<u64, E>> =
            postcard::from_bytes(&reply.into_inner().data).map_err(|e| network_error(&e))?;
        answer.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

async fn send(
    mut client: RaftServiceClient<Channel>,
    action: RPCTypes,
    request: tonic::Request<RaftBytes>,
) -> Result<tonic::Response<RaftBytes>, tonic::Status> {
    match action {
        RPCTypes::Vote => client.vote(request).await,
        RPCTypes::AppendEntries => client.append_entries(request).await,
        RPCTypes::InstallSnapshot => client.install_snapshot(request).await,
    }
}

fn network_error<E: Error + 'static, F: Error>(
    e: &E,
) -> RPCError<u64, NodeAddr, RaftError<u64, F>> {
    RPCError::Network(NetworkError::new(e))
}

/// A peer that cannot be connected to is unreachable (openraft backs off); any other failure is a
/// network error (openraft retries on its next replication round).
fn status_error<F: Error>(status: &tonic::Status) -> RPCError<u64, NodeAddr, RaftError<u64, F>> {
    match status.code() {
        tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(status)),
        _ => RPCError::Network(NetworkError::new(status)),
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        self.call(RPCTypes::AppendEntries, &rpc, option.hard_ttl())
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        self.call(RPCTypes::InstallSnapshot, &rpc, option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        let answer: RpcResult<VoteResponse<u64>, _> =
            self.call(RPCTypes::Vote, &rpc, option.hard_ttl()).await;
        if matches!(&answer, Ok(r) if !r.vote_granted && r.last_log_id > rpc.last_log_id) {
            self.contact.outlogged();
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_connector_makes_each_peer_channel_once_per_address() {
        let made = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&made);
        let connector: PeerConnector = Arc::new(move |endpoint: &Endpoint| {
            assert_eq!(endpoint.uri().scheme_str(), Some("http"));
            seen.fetch_add(1, Ordering::SeqCst);
            endpoint.connect_lazy()
        });
        let transport = TransportConfig {
            connector: Some(connector),
            ..TransportConfig::default()
        };
        let mut factory = NetworkFactory::new(1, transport);
        let peer = |addr: &str| NodeAddr {
            addr: addr.to_string(),
        };
        factory.new_client(2, &peer("sim-host-2:7000")).await;
        factory.new_client(2, &peer("sim-host-2:7000")).await;
        assert_eq!(made.load(Ordering::SeqCst), 1, "the channel is cached");
        factory.new_client(2, &peer("sim-host-2b:7000")).await;
        assert_eq!(
            made.load(Ordering::SeqCst),
            2,
            "a moved peer gets a new one"
        );
    }
}
