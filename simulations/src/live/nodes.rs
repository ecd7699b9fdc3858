//! Allocator nodes on loopback: the global cluster and the regional clusters, each node the
//! real server (`leasehold_allocator::server::run`) on ephemeral ports with mutual TLS.

use super::error::LiveError;
use leasehold_allocator::config::AllocatorConfig;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, DevPki, Role};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a node may take to stop before its task is abandoned.
const STOP_WAIT_MS: u64 = 10_000;
/// Raft timings short enough for elections to finish within a second on loopback.
const RAFT_TIMING: &str = "raft: {heartbeat_ms: 50, election_min_ms: 300, election_max_ms: 600}";
const TICK_MS: u64 = 20;

/// A running allocator node.
pub struct NodeHandle {
    /// Certificate name, e.g. `global-2`.
    pub name: String,
    pub cluster: String,
    pub grpc_addr: String,
    pub http_addr: String,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), String>>,
    /// Why the node stopped on its own, once it has.
    failure: Arc<Mutex<Option<String>>>,
}

/// Where a node sits in the hierarchy.
pub struct NodeSpec<'a> {
    pub cluster: &'a str,
    pub node_id: u64,
    /// Every member of the node's cluster: (id, gRPC port).
    pub members: &'a [(u64, u16)],
    pub http_port: u16,
    /// Upstream addresses and the hex public key their leases are signed with.
    pub upstream: Option<(&'a [String], &'a str)>,
}

/// An unused loopback port. The listener is dropped before the node binds it again, which
/// could race with another process; the demo owns the machine's ephemeral range for the
/// moment it takes, and a lost race surfaces as a node that fails to start.
pub fn free_port() -> Result<u16, LiveError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| LiveError::Node {
            node: "(port)".into(),
            reason: format!("no free loopback port: {e}"),
        })
}

fn node_yaml(dir: &Path, spec: &NodeSpec<'_>) -> String {
    let name = format!("{}-{}", spec.cluster, spec.node_id);
    let grpc = spec
        .members
        .iter()
        .find(|(id, _)| *id == spec.node_id)
        .map_or(0, |(_, p)| *p);
    let bootstrap: Vec<String> = spec
        .members
        .iter()
        .map(|(id, port)| format!("{{id: {id}, addr: \"127.0.0.1:{port}\"}}"))
        .collect();
    let upstream = spec.upstream.map_or(String::new(), |(addrs, key)| {
        let addrs: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
        format!(
            "upstream: [{}]\ntrusted_upstream_keys: [\"{key}\"]\n",
            addrs.join(", ")
        )
    });
    let (c, d) = (dir.join("certs"), dir.join(&name));
    format!(
        "node_id: {id}\ncluster: {cluster}\ngrpc_addr: 127.0.0.1:{grpc}\n\
         http_addr: 127.0.0.1:{http}\nadvertise_addr: 127.0.0.1:{grpc}\ndata_dir: {d}\n\
         signing_key: {key}\nbootstrap: [{bootstrap}]\n{upstream}\
         tls: {{ca: {c}/ca.pem, cert: {c}/allocator-{name}.pem, key: {c}/allocator-{name}-key.pem}}\n\
         {RAFT_TIMING}\ntick_ms: {TICK_MS}\n",
        id = spec.node_id,
        cluster = spec.cluster,
        http = spec.http_port,
        d = d.display(),
        key = signing_key_path(dir, spec.cluster).display(),
        bootstrap = bootstrap.join(", "),
        c = c.display(),
    )
}

/// The lease-signing key of a cluster: one file shared by its nodes, so leases stay
/// verifiable whichever node leads.
pub fn signing_key_path(dir: &Path, cluster: &str) -> std::path::PathBuf {
    dir.join(format!("{cluster}-lease-key.p8"))
}

/// Starts one node in this process.
pub fn start_node(dir: &Path, spec: &NodeSpec<'_>) -> Result<NodeHandle, LiveError> {
    let name = format!("{}-{}", spec.cluster, spec.node_id);
    let cfg = AllocatorConfig::from_yaml(&node_yaml(dir, spec)).map_err(|e| LiveError::Node {
        node: name.clone(),
        reason: e.to_string(),
    })?;
    let (grpc_addr, http_addr) = (cfg.grpc_addr.to_string(), cfg.http_addr.to_string());
    let (stop, rx) = watch::channel(false);
    let failure = Arc::new(Mutex::new(None));
    let task = {
        let failure = Arc::clone(&failure);
        tokio::spawn(async move {
            let result = leasehold_allocator::server::run(cfg, rx)
                .await
                .map_err(|e| e.to_string());
            if let Err(e) = &result {
                *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
            }
            result
        })
    };
    Ok(NodeHandle {
        name,
        cluster: spec.cluster.to_string(),
        grpc_addr,
        http_addr,
        stop,
        task,
        failure,
    })
}

impl NodeHandle {
    /// An error if the node's task ended (it failed to start or crashed).
    pub fn check_alive(&self) -> Result<(), LiveError> {
        if self.task.is_finished() {
            let failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
            let reason = failure
                .clone()
                .unwrap_or_else(|| "stopped unexpectedly".into());
            return Err(LiveError::Node {
                node: self.name.clone(),
                reason,
            });
        }
        Ok(())
    }

    /// Asks the node to stop and waits for it.
    pub async fn stop(self) -> Result<(), LiveError> {
        let _ = self.stop.send(true);
        let fail = |reason: String| LiveError::Node {
            node: self.name.clone(),
            reason,
        };
        match tokio::time::timeout(Duration::from_millis(STOP_WAIT_MS), self.task).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(fail(e)),
            Ok(Err(e)) => Err(fail(format!("task failed: {e}"))),
            Err(_) => Err(fail(format!("did not stop within {STOP_WAIT_MS} ms"))),
        }
    }
}

/// Client channels with the certificate of `name` in `role`.
pub fn channels(pki: &DevPki, role: Role, name: &str) -> Result<ChannelFactory, LiveError> {
    let pem = pki
        .tls_pem(role, name)
        .ok_or_else(|| LiveError::Pki(format!("no {role:?} certificate named {name}")))?;
    let transport = ClientTransport::MutualTls {
        pem,
        server_name: Some("localhost".into()),
    };
    ChannelFactory::new(ChannelSettings::default(), transport)
        .map_err(|e| LiveError::Pki(format!("client TLS for {name}: {e}")))
}

/// An admin client of the node at `addr`.
pub fn admin(
    channels: &ChannelFactory,
    addr: &str,
) -> Result<AdminServiceClient<tonic::transport::Channel>, LiveError> {
    let channel = channels.channel(addr).map_err(|e| LiveError::Node {
        node: addr.to_string(),
        reason: format!("admin channel: {e}"),
    })?;
    Ok(AdminServiceClient::new(channel))
}

/// Polls `f` every 50 ms until it holds, for at most `wait_ms`.
pub async fn eventually<F, Fut>(wait_ms: u64, what: &str, mut f: F) -> Result<(), LiveError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, LiveError>>,
{
    let started = Instant::now();
    let limit = Duration::from_millis(wait_ms);
    while started.elapsed() < limit {
        if f().await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(LiveError::Timeout {
        what: what.to_string(),
        waited_ms: wait_ms,
    })
}
