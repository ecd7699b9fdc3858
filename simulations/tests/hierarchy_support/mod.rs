//! A hierarchy of real allocator nodes on loopback sockets with mutual TLS, agents that
//! lease from them, and `leasectl` to administer them, for the hierarchy tests.

#![allow(dead_code)]

pub mod agents;
pub mod leasectl;

use leasehold_allocator::config::AllocatorConfig;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, DevPki, Role};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub struct Node {
    pub addr: String,
    pub stop: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Node {
    /// Stops the node and waits until it has.
    pub async fn shut_down(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a one-node cluster; `upstream` names the upstream address and the hex public
/// key its leases must be signed with.
pub async fn start_node(dir: &Path, cluster: &str, upstream: Option<(&str, &str)>) -> Node {
    let (grpc, http) = (free_port(), free_port());
    let c = dir.join("certs");
    let data = dir.join(cluster);
    let upstream = upstream.map_or(String::new(), |(addr, key)| {
        format!("upstream: [\"{addr}\"]\ntrusted_upstream_keys: [\"{key}\"]\n")
    });
    let yaml = format!(
        "node_id: 1\ncluster: {cluster}\ngrpc_addr: 127.0.0.1:{grpc}\nhttp_addr: 127.0.0.1:{http}\n\
         advertise_addr: 127.0.0.1:{grpc}\ndata_dir: {d}\nsigning_key: {d}/lease-key.p8\n\
         bootstrap: [{{id: 1, addr: \"127.0.0.1:{grpc}\"}}]\n{upstream}\
         tls: {{ca: {c}/ca.pem, cert: {c}/allocator-{cluster}-1.pem, key: {c}/allocator-{cluster}-1-key.pem}}\n\
         raft: {{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}}\ntick_ms: 20\n",
        d = data.display(),
        c = c.display(),
    );
    let cfg = AllocatorConfig::from_yaml(&yaml).expect("valid config");
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        leasehold_allocator::server::run(cfg, rx)
            .await
            .expect("node runs");
    });
    Node {
        addr: format!("127.0.0.1:{grpc}"),
        stop,
        task,
    }
}

pub fn channels(pki: &DevPki, role: Role, name: &str) -> ChannelFactory {
    let transport = ClientTransport::MutualTls {
        pem: pki.tls_pem(role, name).unwrap(),
        server_name: Some("localhost".into()),
    };
    ChannelFactory::new(ChannelSettings::default(), transport).unwrap()
}

pub async fn admin(pki: &DevPki, addr: &str) -> AdminServiceClient<tonic::transport::Channel> {
    AdminServiceClient::new(channels(pki, Role::Admin, "ops").channel(addr).unwrap())
}

/// Waits until `f` holds, polling; panics with `what` after `secs`.
pub async fn eventually<F, Fut>(secs: u64, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Starts the root cluster ("global") and applies `policy` through its admin API.
pub async fn start_root(dir: &Path, pki: &DevPki, policy: &str) -> Node {
    let root = start_node(dir, "global", None).await;
    eventually(15, "the root to accept the policy", || {
        let addr = root.addr.clone();
        async move {
            let req = leasehold_proto::leasehold::v1::ApplyPolicyRequest {
                yaml: policy.into(),
                ..Default::default()
            };
            admin(pki, &addr).await.apply_policy(req).await.is_ok()
        }
    })
    .await;
    root
}

/// The root's lease-signing public key, hex, as regions list it in `trusted_upstream_keys`.
pub fn root_public_key(dir: &Path) -> String {
    let key = std::fs::read(dir.join("global/lease-key.p8")).unwrap();
    hex::encode(
        leasehold_common::lease::LeaseSigner::from_pkcs8(&key)
            .unwrap()
            .public_key(),
    )
}

/// Starts region `cluster` leasing from `root` and waits until it mirrors `policy_id`
/// from the root's watch stream.
pub async fn start_region(
    dir: &Path,
    pki: &DevPki,
    root: &Node,
    cluster: &str,
    policy_id: &str,
) -> Node {
    let key = root_public_key(dir);
    let region = start_node(dir, cluster, Some((&root.addr, &key))).await;
    eventually(15, "a region to mirror the root's policy", || {
        let addr = region.addr.clone();
        async move {
            let req = leasehold_proto::leasehold::v1::GetPolicyRequest {
                policy_id: policy_id.into(),
                ..Default::default()
            };
            admin(pki, &addr).await.get_policy(req).await.is_ok()
        }
    })
    .await;
    region
}
