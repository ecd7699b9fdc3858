//! One allocator node: Raft, the lease and admin services, metrics and expiry ticks, from
//! an [`AllocatorConfig`].

use crate::config::{AllocatorConfig, ALLOCATOR_CONNECTIONS_MAX_DEFAULT};
use crate::http::{router as http_router, serve as serve_http, ReadinessCheck};
use crate::metrics::{figures_with_bounds, AllocatorMetrics};
use crate::raft::{NodeConfig, NodeHooks, RaftNode, TransportConfig};
use crate::replica::LateReplica;
use crate::rpc_timer::RpcTimer;
use crate::service::call_counts::LeaseCallCounts;
use crate::service::cluster_raft::RaftCluster;
use crate::service::ticker::run_ticker;
use crate::service::{AdminServer, LeaseServer, UpstreamDecider, WatchSettings};
use crate::state::AllocatorState;
use crate::upstream::mirror::{run_mirror, MirrorConfig};
use crate::upstream::{run_upstream, upstream_channel_settings, UpstreamConfig, UpstreamCounters};
use leasehold_client::{CoalesceLimits, CoalescingGrantor, RemoteGrantor};
use leasehold_common::ledger::LedgerConfig;
use leasehold_proto::leasehold::v1::admin_service_server::AdminServiceServer;
use leasehold_proto::leasehold::v1::lease_service_server::LeaseServiceServer;
use leasehold_proto::transport::request_budget::{Budgeted, RequestBudget};
use leasehold_proto::transport::{
    cluster_member_id, ensure_crypto_provider, fit_connections, grpc_rustls_config, AuthMode,
    ChannelFactory, ClientTransport, PeerIdentity, Role, TlsPaths, TlsPem,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;

mod signing_key;
use signing_key::private_dir;
pub use signing_key::signing_key;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(String),
    #[error("signing key {path}: {reason}")]
    SigningKey { path: String, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("raft node: {0}")]
    Node(String),
}

fn node_config(cfg: &AllocatorConfig) -> NodeConfig {
    let mut n = NodeConfig::new(
        cfg.node_id,
        cfg.advertise_addr.clone(),
        cfg.data_dir.join("raft"),
    );
    n.cluster_name = cfg.cluster.clone();
    n.heartbeat_interval_ms = cfg.raft.heartbeat_ms;
    n.election_timeout_min_ms = cfg.raft.election_min_ms;
    n.election_timeout_max_ms = cfg.raft.election_max_ms;
    n.snapshot_logs_since_last = cfg.raft.snapshot_every_entries;
    n
}

/// Transport security and caller rules from the config.
fn security(cfg: &AllocatorConfig) -> Result<(TransportConfig, AuthMode), ServerError> {
    let Some(files) = &cfg.tls else {
        tracing::warn!(
            "running WITHOUT TLS or client authentication (--insecure): development only"
        );
        let assumed = PeerIdentity::new(Role::Admin, "insecure-dev")
            .map_err(|e| ServerError::Config(e.to_string()))?;
        return Ok((TransportConfig::default(), AuthMode::Insecure { assumed }));
    };
    ensure_crypto_provider();
    let pem = TlsPaths {
        ca: files.ca.clone(),
        cert: files.cert.clone(),
        key: files.key.clone(),
    }
    .load()
    .map_err(|e| ServerError::Config(e.to_string()))?;
    check_own_identity(cfg, &pem)?;
    let server = grpc_rustls_config(&pem).map_err(|e| ServerError::Config(e.to_string()))?;
    let client = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&pem.ca))
        .identity(tonic::transport::Identity::from_pem(&pem.cert, &pem.key));
    let transport = TransportConfig {
        client_tls: Some(client),
        server_tls: Some(server),
        ..TransportConfig::default()
    };
    Ok((transport, AuthMode::MutualTls))
}

/// A node's certificate must name it as its peers expect: `allocator/<cluster>-<node id>`.
fn check_own_identity(cfg: &AllocatorConfig, pem: &TlsPem) -> Result<(), ServerError> {
    let own = pem
        .own_identity()
        .map_err(|e| ServerError::Config(format!("tls.cert: {e}")))?;
    let named = own.identity.name == cfg.cluster
        || cluster_member_id(&own.identity, &cfg.cluster) == Some(cfg.node_id);
    if own.identity.role != Role::Allocator || !named {
        return Err(ServerError::Config(format!(
            "tls.cert names `{}`; node {} of cluster `{}` needs a certificate for `allocator/{}-{}` \
             (leasectl certs init --allocators {}-{}) or the cluster's shared `allocator/{}`",
            own.identity, cfg.node_id, cfg.cluster, cfg.cluster, cfg.node_id, cfg.cluster, cfg.node_id, cfg.cluster
        )));
    }
    Ok(())
}

/// Runs the node until `shutdown` flips to true.
pub async fn run(
    cfg: AllocatorConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ServerError> {
    private_dir(&cfg.data_dir)
        .map_err(|e| ServerError::Config(format!("data_dir {}: {e}", cfg.data_dir.display())))?;
    // The gRPC and HTTP listeners each hold up to `connections_max`.
    let connections_max = fit_connections(
        cfg.listener.connections_max,
        ALLOCATOR_CONNECTIONS_MAX_DEFAULT,
        2,
    )
    .map_err(|e| ServerError::Config(e.to_string()))?;
    let limits = cfg.listener.limits(connections_max);
    let signer = Arc::new(signing_key(&cfg.signing_key)?);
    tracing::info!(
        key_id = signer.key_id(),
        public_key = hex::encode(signer.public_key()),
        "lease signing key (list the public key in a delegated cluster's trusted_upstream_keys)"
    );
    let (mut transport, auth) = security(&cfg)?;
    transport.tls_limits = limits;
    let late: LateReplica<RaftNode<AllocatorState>> = LateReplica::default();
    let cluster = Arc::new(RaftCluster {
        node: late.clone(),
        cluster_id: cfg.cluster.clone(),
        level: cfg.level().name().into(),
    });
    let lease_calls = Arc::new(LeaseCallCounts::default());
    let mut lease = LeaseServer::new(
        late.clone(),
        Arc::clone(&signer),
        auth.clone(),
        WatchSettings::default(),
    )
    .with_counts(Arc::clone(&lease_calls));
    let upstream = if cfg.is_root() {
        None
    } else {
        Some(upstream_link(&cfg)?)
    };
    if let Some(up) = &upstream {
        // The decisions a region forwards at once go up in shared calls.
        let grantor = CoalescingGrantor::new(
            up.grantor.clone(),
            up.config.holder_id.clone(),
            CoalesceLimits::default(),
        );
        lease = lease.with_upstream(UpstreamDecider {
            grantor: Arc::new(grantor),
            holder_id: up.config.holder_id.clone(),
        });
    }
    let admin = AdminServer::new(late.clone(), auth.clone(), cluster);
    let rpc = RpcTimer::default();
    let timer = rpc.clone();
    // Raft's own service is left out: only the cluster's members reach its handlers, and
    // snapshot chunks are larger than any lease or admin call.
    let budget = Arc::new(RequestBudget::new(
        cfg.listener.request_bytes_buffered_max,
        cfg.listener.request_body_timeout_ms,
    ));
    let counted = Arc::clone(&budget);
    let hooks = NodeHooks {
        transport,
        services: Some(Box::new(move |router| {
            router
                .add_service(Budgeted::new(
                    timer.wrap(LeaseServiceServer::new(lease)),
                    Arc::clone(&counted),
                ))
                .add_service(Budgeted::new(
                    // A backup travels whole in one message, both ways.
                    timer.wrap(
                        AdminServiceServer::new(admin)
                            .max_decoding_message_size(leasehold_proto::ADMIN_MESSAGE_LEN_MAX)
                            .max_encoding_message_size(leasehold_proto::ADMIN_MESSAGE_LEN_MAX),
                    ),
                    counted,
                ))
        })),
        raft_auth: matches!(auth, AuthMode::MutualTls).then_some(AuthMode::MutualTls),
        raft_cluster: Some(cfg.cluster.clone()),
        listener_limits: limits,
        ..NodeHooks::default()
    };
    let listener = tokio::net::TcpListener::bind(cfg.grpc_addr)
        .await
        .map_err(|source| ServerError::Listen {
            addr: cfg.grpc_addr.to_string(),
            source,
        })?;
    let stop = {
        let mut s = shutdown.clone();
        async move {
            let _ = s.wait_for(|v| *v).await;
        }
    };
    let mut ledger = if cfg.is_root() {
        LedgerConfig::root(cfg.cluster.clone())
    } else {
        LedgerConfig::delegated(cfg.cluster.clone())
    };
    ledger.level = cfg.level();
    ledger.limits = cfg.ledger.limits();
    let initial = AllocatorState::new(ledger).with_usage_limits(cfg.usage.limits());
    let node = RaftNode::start_with(node_config(&cfg), hooks, initial, listener, stop)
        .await
        .map_err(|e| ServerError::Node(e.to_string()))?;
    late.set(node.clone());
    bootstrap(&cfg, &node).await;

    let mut metrics = AllocatorMetrics::new(
        {
            let node = node.clone();
            Arc::new(move || node.read_local(|s| figures_with_bounds(s.ledger(), s.policies())))
        },
        rpc,
    );
    metrics.register_listener(budget);
    metrics.register_lease_calls(lease_calls);
    let upstream_counters = Arc::new(UpstreamCounters::default());
    if !cfg.is_root() {
        metrics.register_upstream(Arc::clone(&upstream_counters));
    }
    let metrics = Arc::new(metrics);
    let ready: ReadinessCheck = {
        let node = node.clone();
        Arc::new(move || match node.metrics().leader_id {
            Some(_) => Ok(()),
            None => Err("no leader known".into()),
        })
    };
    let http_listener = tokio::net::TcpListener::bind(cfg.http_addr)
        .await
        .map_err(|source| ServerError::Listen {
            addr: cfg.http_addr.to_string(),
            source,
        })?;
    let http_stop = {
        let mut s = shutdown.clone();
        async move {
            let _ = s.wait_for(|v| *v).await;
        }
    };
    tokio::spawn(serve_http(
        http_listener,
        http_router(Arc::clone(&metrics), ready),
        limits,
        http_stop,
    ));
    let tick_stop = {
        let mut s = shutdown.clone();
        async move {
            let _ = s.wait_for(|v| *v).await;
        }
    };
    tokio::spawn(run_ticker(node.clone(), cfg.tick_ms, tick_stop));
    if let Some(up) = upstream {
        start_upstream(&cfg, up, node.clone(), upstream_counters, &shutdown)?;
    }
    tracing::info!(node_id = cfg.node_id, grpc = %cfg.grpc_addr, http = %cfg.http_addr, "allocator started");
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|v| *v) => break,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                let m = node.metrics();
                metrics.is_leader.set(i64::from(m.leader_id == Some(cfg.node_id)));
                metrics.raft_term.set(m.current_term as i64);
                metrics.raft_last_log_index.set(m.last_log_index.unwrap_or(0) as i64);
                metrics.raft_applied_index.set(m.last_applied_index.unwrap_or(0) as i64);
                metrics.raft_snapshot_index.set(m.snapshot_index.unwrap_or(0) as i64);
            }
        }
    }
    node.shutdown().await;
    tracing::info!(node_id = cfg.node_id, "allocator stopped");
    Ok(())
}

/// A delegated node's connection to its upstream cluster, shared by the lease driver and
/// the forwarding of exact decisions.
struct UpstreamLink {
    grantor: Arc<RemoteGrantor>,
    channels: ChannelFactory,
    config: UpstreamConfig,
}

fn upstream_link(cfg: &AllocatorConfig) -> Result<UpstreamLink, ServerError> {
    let transport = match &cfg.tls {
        None => ClientTransport::Plaintext,
        Some(files) => ClientTransport::MutualTls {
            pem: TlsPaths {
                ca: files.ca.clone(),
                cert: files.cert.clone(),
                key: files.key.clone(),
            }
            .load()
            .map_err(|e| ServerError::Config(e.to_string()))?,
            server_name: None,
        },
    };
    let channels = || {
        ChannelFactory::new(upstream_channel_settings(), transport.clone())
            .map_err(|e| ServerError::Config(format!("upstream: {e}")))
    };
    Ok(UpstreamLink {
        grantor: Arc::new(RemoteGrantor::new(channels()?, cfg.upstream.clone(), 3)),
        channels: channels()?,
        config: UpstreamConfig::new(&cfg.cluster),
    })
}

/// A delegated node's link to its upstream cluster: the lease driver and the watch mirror,
/// both acting only while this node leads.
fn start_upstream(
    cfg: &AllocatorConfig,
    link: UpstreamLink,
    node: RaftNode<AllocatorState>,
    counters: Arc<UpstreamCounters>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(), ServerError> {
    let verifier = cfg
        .upstream_verifier()
        .map_err(|e| ServerError::Config(e.to_string()))?;
    if verifier.is_none() {
        tracing::warn!("no trusted_upstream_keys: upstream leases are trusted on TLS alone");
    }
    let up = link.config;
    let stop = |mut s: watch::Receiver<bool>| async move {
        let _ = s.wait_for(|v| *v).await;
    };
    tokio::spawn(run_upstream(
        node.clone(),
        link.grantor,
        verifier,
        up.clone(),
        counters,
        stop(shutdown.clone()),
    ));
    let mirror = MirrorConfig {
        channels: link.channels,
        addrs: cfg.upstream.clone(),
        holder_id: up.holder_id,
        silence_max_ms: 2 * WatchSettings::default().heartbeat_ms,
        retry_ms: up.retry_ms,
    };
    tokio::spawn(run_mirror(node, mirror, stop(shutdown.clone())));
    tracing::info!(upstream = ?cfg.upstream, "leasing from upstream");
    Ok(())
}

/// The lowest-numbered bootstrap member initialises a new cluster; on a restart (or on the
/// others) there is nothing to do.
async fn bootstrap(cfg: &AllocatorConfig, node: &RaftNode<AllocatorState>) {
    let Some(first) = cfg.bootstrap.iter().map(|m| m.id).min() else {
        return;
    };
    // A restarted node already holds the membership; asking again only earns a refusal.
    if first != cfg.node_id || node.is_initialized().await {
        return;
    }
    let members: BTreeMap<u64, String> = cfg
        .bootstrap
        .iter()
        .map(|m| (m.id, m.addr.clone()))
        .collect();
    match node.initialize(members).await {
        Ok(()) => tracing::info!("cluster initialised"),
        Err(e) => tracing::debug!(error = %e, "not initialising (already initialised)"),
    }
}
