//! An allocator's lease and admin services over a single-process replica, on a loopback
//! socket with mutual TLS from a throwaway PKI.

#![allow(dead_code)]

use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::service::{AdminServer, LeaseServer, SingleNode, WatchSettings};
use leasehold_allocator::state::AllocatorState;
use leasehold_common::lease::{LeaseSigner, LeaseVerifier};
use leasehold_common::ledger::LedgerConfig;
use leasehold_common::time::WallClock;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::leasehold::v1::admin_service_server::AdminServiceServer;
use leasehold_proto::leasehold::v1::lease_service_client::LeaseServiceClient;
use leasehold_proto::leasehold::v1::lease_service_server::LeaseServiceServer;
use leasehold_proto::transport::{
    serve_router, server_builder, AuthMode, ChannelFactory, ChannelSettings, ClientTransport,
    DevPki, PkiSpec, Role,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;
use tonic::transport::Channel;

pub struct Cluster<R = LocalReplica<AllocatorState>> {
    pub addr: SocketAddr,
    pub pki: DevPki,
    pub verifier: LeaseVerifier,
    pub replica: R,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100, per: 1s}\nburst: 200\nlease: {ttl: 5s, max_credit: 150, reserve_fraction: 0}\n";

pub async fn start() -> Cluster {
    let replica = LocalReplica::new(
        AllocatorState::new(LedgerConfig::root("global")),
        Arc::new(WallClock),
    );
    start_with(replica).await
}

/// The services over `replica`.
pub async fn start_with<R: Replica<AllocatorState>>(replica: R) -> Cluster<R> {
    let pki = DevPki::generate(
        &PkiSpec::local(&["global-1"], &["gw-1", "gw-2"], &["ops"]),
        SystemTime::now(),
    )
    .unwrap();
    let signer = Arc::new(LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap());
    let mut verifier = LeaseVerifier::new();
    verifier.trust(signer.public_key()).unwrap();
    let watch = WatchSettings {
        poll_ms: 20,
        heartbeat_ms: 1_000,
        ..WatchSettings::default()
    };
    let cluster = Arc::new(SingleNode {
        cluster_id: "global".into(),
        level: "global".into(),
        node_id: 1,
        addr: "127.0.0.1".into(),
    });
    let router = server_builder(Some(&pki.tls_pem(Role::Allocator, "global-1").unwrap()))
        .unwrap()
        .add_service(LeaseServiceServer::new(LeaseServer::new(
            replica.clone(),
            signer,
            AuthMode::MutualTls,
            watch,
        )))
        .add_service(AdminServiceServer::new(AdminServer::new(
            replica.clone(),
            AuthMode::MutualTls,
            cluster,
        )));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_router(router, listener, async {
        let _ = rx.await;
    }));
    Cluster {
        addr,
        pki,
        verifier,
        replica,
        _stop: tx,
    }
}

impl<R> Cluster<R> {
    pub fn channel(&self, role: Role, name: &str) -> Channel {
        let transport = ClientTransport::MutualTls {
            pem: self.pki.tls_pem(role, name).unwrap(),
            server_name: Some("localhost".into()),
        };
        ChannelFactory::new(ChannelSettings::default(), transport)
            .unwrap()
            .channel(&self.addr.to_string())
            .unwrap()
    }

    pub fn admin(&self) -> AdminServiceClient<Channel> {
        AdminServiceClient::new(self.channel(Role::Admin, "ops"))
    }

    pub fn agent(&self, name: &str) -> LeaseServiceClient<Channel> {
        LeaseServiceClient::new(self.channel(Role::Agent, name))
    }

    /// Writes the admin's certificate files so the `leasectl` binary can use them.
    pub fn write_certs(&self, dir: &std::path::Path) {
        self.pki.write_to(dir, true).unwrap();
    }
}
