//! `leasehold-agent`: the sidecar beside a gateway replica.
//!
//! Serves Envoy's rate-limit service over gRPC and admission over HTTP, on TCP or Unix
//! sockets. `--standalone --ratelimit-config limits.yaml` is a drop-in for
//! envoyproxy/ratelimit on one host: its rules are enforced in this process. With
//! `--allocator ADDR`, leased policies draw credit from an allocator cluster, and
//! envoyproxy/ratelimit rules come from it too (`leasectl policy apply -f limits.yaml`), so
//! every agent shares one budget per rule; `--ratelimit-config` is refused there.
//!
//! Settings come from `--config agent.yaml` (see `deploy/config/agent/agent.yaml`) and from
//! flags, which override the file field by field.

use anyhow::{Context, Result};
use clap::Parser;
use leasehold_agent::api::admit::{admit_service, AdmitServer};
use leasehold_agent::api::http;
use leasehold_agent::api::listen::{
    grpc_server, grpc_tls_config, http_tls_config, serve_grpc, serve_http, with_connection_age,
    Listener,
};
use leasehold_agent::api::request_budget::Budgeted;
use leasehold_agent::api::rls::{rls_service, RlsServer};
use leasehold_agent::config::{AgentConfig, Overrides, TlsFiles, UnknownPolicy};
use leasehold_agent::engine::{Engine, EngineLimits, RuleSource};
use leasehold_agent::exact::ExactGate;
use leasehold_agent::lease::{LeaseManager, ManagerConfig, SledStore};
use leasehold_agent::limiter_store::{self, LimiterStore, LIMITERS_TREE, WINDOWS_TREE};
use leasehold_client::{Grantor, LocalGrantor, RemoteGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::policy::{Policy, POLICY_YAML_LEN_MAX};
use leasehold_common::read::read_text_capped;
use leasehold_common::time::{Clock, SystemClock, WallClock};
use leasehold_proto::transport::{ChannelFactory, ChannelSettings};
use std::path::PathBuf;
use std::sync::Arc;

/// How many allocator addresses a lease call tries before the grantor counts as unreachable.
const GRANTOR_ATTEMPTS: usize = 3;

/// Connections to the allocators. A lease call is one Raft commit, normally answered in
/// milliseconds; a node that is stopped or cut off without a reset (SIGSTOP, a partition
/// dropping packets) must cost a holder well under its refresh horizon before it tries the
/// next node, so each call waits at most a second and a silent connection is dropped after
/// 250 + 500 ms. A call cut short is retried with the same request id, which the ledger
/// answers with its first outcome.
const GRANTOR_CHANNEL: ChannelSettings = ChannelSettings {
    connect_timeout_ms: 500,
    request_timeout_ms: 1_000,
    channels_max: 64,
    keepalive_interval_ms: 250,
    keepalive_timeout_ms: 500,
};

#[derive(Parser, Debug)]
#[command(
    name = "leasehold-agent",
    version,
    about = "Leasehold sidecar: local admission against leased credit"
)]
struct Args {
    /// YAML configuration file; every flag below overrides its field.
    #[arg(long)]
    config: Option<PathBuf>,
    /// gRPC listener (Envoy RLS and the native Admit API): `ip:port` or `unix:/path`
    /// [default: 127.0.0.1:8081].
    #[arg(long)]
    grpc_addr: Option<String>,
    /// HTTP listener (`/v1/admit`, `/metrics`, `/healthz`): `ip:port` or `unix:/path`
    /// [default: 127.0.0.1:8080].
    #[arg(long)]
    http_addr: Option<String>,
    /// envoyproxy/ratelimit YAML: a file, or a directory of them; only with --standalone
    /// (with allocators, apply it there: `leasectl policy apply -f FILE`).
    #[arg(long)]
    ratelimit_config: Option<PathBuf>,
    /// Leasehold policy YAML files (repeatable; replaces the file's `policies`).
    #[arg(long = "policy")]
    policies: Vec<PathBuf>,
    /// Run with no allocator: leased policies are granted by a ledger in this process.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    standalone: Option<bool>,
    /// Allocator addresses (`host:port`, repeatable; replaces the file's `allocators`).
    #[arg(long = "allocator")]
    allocators: Vec<String>,
    /// This agent's holder id (its certificate's name under mutual TLS) [default: agent].
    #[arg(long)]
    holder_id: Option<String>,
    /// CA, certificate and key (PEM) for mutual TLS to the allocators.
    #[arg(long, requires_all = ["cert", "key"])]
    ca: Option<PathBuf>,
    #[arg(long, requires_all = ["ca", "key"])]
    cert: Option<PathBuf>,
    #[arg(long, requires_all = ["ca", "cert"])]
    key: Option<PathBuf>,
    /// Talk to the allocators in plaintext: only for a cluster started with --insecure.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    insecure: Option<bool>,
    /// Add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset headers to Envoy
    /// responses.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    response_headers: Option<bool>,
    /// CA (for gateways' client certificates), certificate and key (PEM) for mutual TLS on
    /// the gRPC listener.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    #[arg(long, requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires_all = ["tls_ca", "tls_cert"])]
    tls_key: Option<PathBuf>,
    /// Serve gRPC in plaintext on an address other hosts can reach.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    listen_insecure: Option<bool>,
    /// State file (a sled database): a restarted agent never spends credit twice, and a
    /// standalone one keeps its local limiters' state.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// Public key (hex) the allocators sign leases with (repeatable); leases without a
    /// valid signature by one of them are never spent.
    #[arg(long = "allocator-key")]
    allocator_keys: Vec<String>,
    /// What native Admit and HTTP dimensions naming an unknown policy id get: deny or allow.
    #[arg(long)]
    unknown_policy: Option<UnknownPolicy>,
    /// Wait for the allocator's decision on exact policies, in milliseconds.
    #[arg(long)]
    decide_timeout_ms: Option<u64>,
    /// Policies from the allocator unconfirmed this long count as stale, in milliseconds.
    #[arg(long)]
    policy_stale_after_ms: Option<u64>,
    /// Connections each listener keeps open at once (more wait in the backlog).
    #[arg(long)]
    connections_max: Option<usize>,
    /// Connections one client certificate may keep open on each TLS listener.
    #[arg(long)]
    connections_per_peer_max: Option<usize>,
    /// Close a connection silent this long, in milliseconds.
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    /// Ask a gRPC connection open this long to go away, in milliseconds.
    #[arg(long)]
    connection_age_max_ms: Option<u64>,
    /// An HTTP request's headers must arrive within this many milliseconds.
    #[arg(long)]
    header_timeout_ms: Option<u64>,
    /// Longest envoyproxy/ratelimit key, in bytes once encoded [default: 4096].
    #[arg(long)]
    ratelimit_key_len_max: Option<usize>,
    /// Most keys held at once; new keys past it share their policy's overflow key.
    #[arg(long)]
    keys_max: Option<usize>,
    /// Most first leases asked of the allocator per second [default: 2000].
    #[arg(long)]
    acquire_rate_max_per_s: Option<u64>,
    /// Most keys waiting for a first lease [default: 16384].
    #[arg(long)]
    acquire_waiting_max: Option<usize>,
    /// Most requests admitted with a delay waiting at once; 0 turns shaping off [default: 1024].
    #[arg(long)]
    shaped_waiting_max: Option<usize>,
    /// Count hits envoyproxy/ratelimit rules refuse, as that service does [default: true].
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    ratelimit_count_denied: Option<bool>,
    /// Request bytes buffered at once across all gRPC calls; a call that would pass it is
    /// answered RESOURCE_EXHAUSTED [default: 33554432].
    #[arg(long)]
    request_bytes_buffered_max: Option<usize>,
    /// A gRPC request body must arrive whole within this many milliseconds
    /// [default: 10000].
    #[arg(long)]
    request_body_timeout_ms: Option<u64>,
}

fn tls_files(ca: Option<PathBuf>, cert: Option<PathBuf>, key: Option<PathBuf>) -> Option<TlsFiles> {
    Some(TlsFiles {
        ca: ca?,
        cert: cert?,
        key: key?,
    })
}

impl Args {
    /// The configuration file, if any, and what the flags override in it.
    fn split(self) -> (Option<PathBuf>, Overrides) {
        let overrides = Overrides {
            grpc_addr: self.grpc_addr,
            http_addr: self.http_addr,
            ratelimit_config: self.ratelimit_config,
            policies: self.policies,
            standalone: self.standalone,
            allocators: self.allocators,
            holder_id: self.holder_id,
            allocator_tls: tls_files(self.ca, self.cert, self.key),
            insecure: self.insecure,
            response_headers: self.response_headers,
            listen_tls: tls_files(self.tls_ca, self.tls_cert, self.tls_key),
            listen_insecure: self.listen_insecure,
            state_file: self.state_file,
            allocator_keys: self.allocator_keys,
            unknown_policy: self.unknown_policy,
            decide_timeout_ms: self.decide_timeout_ms,
            policy_stale_after_ms: self.policy_stale_after_ms,
            connections_max: self.connections_max,
            connections_per_peer_max: self.connections_per_peer_max,
            idle_timeout_ms: self.idle_timeout_ms,
            connection_age_max_ms: self.connection_age_max_ms,
            header_timeout_ms: self.header_timeout_ms,
            ratelimit_key_len_max: self.ratelimit_key_len_max,
            keys_max: self.keys_max,
            ratelimit_count_denied: self.ratelimit_count_denied,
            acquire_rate_max_per_s: self.acquire_rate_max_per_s,
            acquire_waiting_max: self.acquire_waiting_max,
            shaped_waiting_max: self.shaped_waiting_max,
            request_bytes_buffered_max: self.request_bytes_buffered_max,
            request_body_timeout_ms: self.request_body_timeout_ms,
        };
        (self.config, overrides)
    }
}

fn load_policies(cfg: &AgentConfig) -> Result<Vec<Policy>> {
    let mut policies = Vec::with_capacity(cfg.policies.len());
    for p in &cfg.policies {
        let text = read_text_capped(p, POLICY_YAML_LEN_MAX as u64)
            .with_context(|| format!("reading {}", p.display()))?;
        policies
            .push(Policy::from_yaml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?);
    }
    Ok(policies)
}

fn load_envoy(cfg: &AgentConfig) -> Result<EnvoyConfig> {
    Ok(match &cfg.ratelimit_config {
        Some(p) => leasehold_agent::reload::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => EnvoyConfig::default(),
    })
}

/// The in-process ledger of a standalone agent, or the allocator cluster.
fn grantor(cfg: &AgentConfig, policies: &[Policy]) -> Result<Arc<dyn Grantor>> {
    if cfg.standalone {
        let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // UNIX time, so that its windows start on the epoch's boundaries as an
        // allocator's do; its leases are measured against the agent's own clock.
        let local = Arc::new(LocalGrantor::new(
            Ledger::new(LedgerConfig::root("standalone")),
            signer,
            Arc::new(WallClock),
        ));
        local.install(policies).map_err(anyhow::Error::msg)?;
        let ticking = Arc::clone(&local);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                ticking.tick();
            }
        });
        return Ok(local);
    }
    if cfg.insecure {
        tracing::warn!("talking to the allocators in PLAINTEXT (insecure): development only");
    }
    let channels = ChannelFactory::new(GRANTOR_CHANNEL, cfg.allocator_transport()?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Arc::new(RemoteGrantor::new(
        channels,
        cfg.allocators.clone(),
        GRANTOR_ATTEMPTS,
    )))
}

/// Follows steps of the wall clock, so that windows keep ending on UNIX-time boundaries.
fn keep_windows_aligned(engine: Arc<Engine>, clock: SystemClock) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            engine.sync_unix_time(clock.now());
        }
    });
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

fn main() -> Result<()> {
    runtime()?.block_on(run())
}

/// A current-thread runtime when the agent has one worker (one CPU available, as under
/// `taskset -c 0`, or `TOKIO_WORKER_THREADS=1`), a multi-threaded one otherwise.
///
/// On one thread, the calls a connection read brings in all run before the connection is
/// polled again, so their answers leave in one write; the multi-threaded scheduler runs the
/// connection right after the first answer wakes it, which costs a write per answer.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let workers = std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder.enable_all().build()
}

async fn run() -> Result<()> {
    let (file, flags) = Args::parse().split();
    // Colour codes only for a terminal: a log file or collector gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let cfg = AgentConfig::resolve(file.as_deref(), flags)?;
    let connections_max = cfg.fit_connections()?;
    let policies = load_policies(&cfg)?;
    let mut rules = RuleSource::from_policies(policies.clone());
    rules.envoy = Some(load_envoy(&cfg)?);
    let clock = SystemClock::new();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .limits(EngineLimits {
                envoy_key_len_max: cfg.ratelimit_key_len_max,
                keys_max: cfg.keys_max,
                shaped_waiting_max: cfg.shaped_waiting_max,
                ..EngineLimits::default()
            })
            .envoy_count_denied(cfg.ratelimit_count_denied)
            .unknown_policy(cfg.unknown_policy)
            .build(rules)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    keep_windows_aligned(Arc::clone(&engine), clock.clone());
    leasehold_agent::heap::spawn_trim();
    leasehold_agent::reload::spawn_watch(Arc::clone(&engine), cfg.ratelimit_config.clone())
        .context("watching --ratelimit-config")?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let queue = engine.take_acquire_queue().context("acquire queue")?;
    let mut manager_cfg = ManagerConfig::new(cfg.holder_id.clone());
    manager_cfg.verifier = cfg.lease_verifier()?;
    manager_cfg.acquire_rate_max_per_s = cfg.acquire_rate_max_per_s;
    manager_cfg.acquire_waiting_max = cfg.acquire_waiting_max;
    manager_cfg.policy_stale_after_ms = cfg.policy_stale_after_ms;
    let grantor = grantor(&cfg, &policies)?;
    let gate = Arc::new(ExactGate::new(Arc::clone(&engine)).with_grantor(
        Arc::clone(&grantor),
        cfg.holder_id.clone(),
        cfg.decide_timeout_ms,
    ));
    // One handle on the state file: the leases' marks and a standalone agent's limiters.
    let store = match &cfg.state_file {
        Some(path) => Some(
            SledStore::open(path, manager_cfg.leases_max).map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        None => None,
    };
    let mut manager = LeaseManager::new(manager_cfg, grantor, clock.clone(), queue)
        .with_engine(Arc::clone(&engine));
    let (limiters_tx, limiters_rx) = tokio::sync::watch::channel(false);
    let mut limiters_task = None;
    if let Some(store) = store {
        if cfg.standalone {
            let tree = |name| store.tree(name).map_err(anyhow::Error::msg);
            let limiters = LimiterStore::new(tree(LIMITERS_TREE)?, tree(WINDOWS_TREE)?);
            let restored = limiter_store::restore(&engine, &limiters, &clock)?;
            tracing::info!(
                limiters = restored,
                "limiter states restored from the state file"
            );
            limiters_task = Some(tokio::spawn(limiter_store::run(
                Arc::clone(&engine),
                limiters,
                clock.clone(),
                limiters_rx,
            )));
        }
        manager = manager.with_store(Arc::new(store));
    }
    // Rules from the allocator: not ready before its current policies arrived.
    let readiness: http::Readiness = if cfg.standalone || cfg.allocators.is_empty() {
        Arc::new(|| Ok(()))
    } else {
        let synced = manager.policies_synced();
        Arc::new(move || {
            if synced.load(std::sync::atomic::Ordering::Acquire) {
                Ok(())
            } else {
                Err("policies not yet received from the allocator".into())
            }
        })
    };
    let manager_task = tokio::spawn(manager.run(rx.clone()));
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };

    let tls = cfg.listen_tls_pem()?;
    if tls.is_none() && cfg.listen_insecure {
        tracing::warn!(addr = %cfg.grpc_addr, "serving gRPC in PLAINTEXT to other hosts (listen_insecure)");
    }
    let budget = Arc::new(cfg.request_budget());
    let rls = rls_service(RlsServer::new(
        Arc::clone(&engine),
        clock.clone(),
        cfg.response_headers,
    ));
    let admit = admit_service(AdmitServer::with_gate(Arc::clone(&gate), clock.clone()));
    let grpc = with_connection_age(grpc_server(), cfg.connection_age_max_ms)
        .add_service(Budgeted::new(rls, Arc::clone(&budget)))
        .add_service(Budgeted::new(admit, Arc::clone(&budget)));
    let grpc_listener = cfg.grpc_listen()?.bind().await?;
    tracing::info!(addr = %grpc_listener.local_addr()?, mtls = tls.is_some(), "gRPC (Envoy RLS, Admit) listening");
    let grpc_tls = tls.as_ref().map(grpc_tls_config).transpose()?;
    let grpc_task = tokio::spawn(serve_grpc(
        grpc,
        grpc_listener,
        grpc_tls,
        cfg.grpc_limits(connections_max),
        stopped(rx.clone()),
    ));

    let http_tls = tls.as_ref().map(http_tls_config).transpose()?;
    let http_listener = cfg.http_listen()?.bind().await?;
    let http_mtls = http_tls.is_some() && matches!(http_listener, Listener::Tcp(_));
    tracing::info!(addr = %http_listener.local_addr()?, mtls = http_mtls, "HTTP listening");
    let router = http::router_with_readiness(gate, clock, readiness, Some(budget));
    let http_task = tokio::spawn(serve_http(
        router,
        http_listener,
        http_tls,
        cfg.http_limits(connections_max),
        stopped(rx),
    ));

    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = tx.send(true);
    let _ = grpc_task.await;
    let _ = http_task.await;
    // Saved once nothing is served any more, so that no counted hit is left out.
    let _ = limiters_tx.send(true);
    if let Some(task) = limiters_task {
        let _ = task.await;
    }
    let settled = manager_task.await.context("lease manager")?;
    tracing::info!(
        releases = settled.releases,
        reclaimed = settled.reclaimed,
        "leases released"
    );
    Ok(())
}
