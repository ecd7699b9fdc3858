//! `leasehold-agent`: the sidecar beside a gateway replica.
//!
//! Serves Envoy's rate-limit service over gRPC and admission over HTTP, on TCP or Unix
//! sockets. `--standalone --ratelimit-config limits.yaml` is a drop-in for
//! envoyproxy/ratelimit on one host: its rules are enforced in this process. With
//! `--allocator ADDR`, leased policies draw credit from an allocator cluster.

use anyhow::{bail, Context, Result};
use clap::Parser;
use leasehold_agent::api::{admit::AdmitServer, http, rls::RlsServer};
use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_agent::lease::{Grantor, LeaseManager, LocalGrantor, ManagerConfig, RemoteGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use leasehold_proto::leasehold::v1::admit_service_server::AdmitServiceServer;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, TlsPaths};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "leasehold-agent",
    version,
    about = "Leasehold sidecar: local admission against leased credit"
)]
struct Args {
    /// gRPC listener (Envoy RLS and the native Admit API): `host:port` or `unix:/path`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    grpc_addr: String,
    /// HTTP listener (`/v1/admit`, `/metrics`, `/healthz`): `host:port` or `unix:/path`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    http_addr: String,
    /// envoyproxy/ratelimit YAML: a file, or a directory of them.
    #[arg(long)]
    ratelimit_config: Option<PathBuf>,
    /// Leasehold policy YAML files.
    #[arg(long = "policy")]
    policies: Vec<PathBuf>,
    /// Run with no allocator: leased policies are granted by a ledger in this process.
    #[arg(long)]
    standalone: bool,
    /// Allocator addresses (`host:port`, repeatable) to lease credit from.
    #[arg(long = "allocator")]
    allocators: Vec<String>,
    /// This agent's holder id (its certificate's name under mutual TLS).
    #[arg(long, default_value = "agent")]
    holder_id: String,
    /// CA, certificate and key (PEM) for mutual TLS to the allocators.
    #[arg(long, requires_all = ["cert", "key"])]
    ca: Option<PathBuf>,
    #[arg(long)]
    cert: Option<PathBuf>,
    #[arg(long)]
    key: Option<PathBuf>,
    /// Talk to the allocators in plaintext: only for a cluster started with --insecure.
    #[arg(long)]
    insecure: bool,
    /// Add x-ratelimit-* headers to Envoy responses.
    #[arg(long)]
    response_headers: bool,
    /// Lease state file (a sled database): a restarted agent never spends credit twice.
    #[arg(long)]
    state_file: Option<PathBuf>,
}

/// The in-process ledger of a standalone agent, or the allocator cluster.
fn grantor(args: &Args) -> Result<Arc<dyn Grantor>> {
    if args.standalone {
        let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let local = Arc::new(LocalGrantor::new(
            Ledger::new(LedgerConfig::root("standalone")),
            signer,
            Arc::new(SystemClock::new()),
        ));
        let mut policies = Vec::new();
        for p in &args.policies {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            policies.push(
                Policy::from_yaml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
            );
        }
        local.install(&policies).map_err(anyhow::Error::msg)?;
        let ticking = Arc::clone(&local);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                ticking.tick();
            }
        });
        return Ok(local);
    }
    let transport = match (&args.ca, &args.cert, &args.key, args.insecure) {
        (_, _, _, true) => ClientTransport::Plaintext,
        (Some(ca), Some(cert), Some(key), false) => {
            let pem = TlsPaths {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            }
            .load()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            ClientTransport::MutualTls {
                pem,
                server_name: None,
            }
        }
        _ => bail!("give --ca, --cert and --key for mutual TLS to the allocators, or --insecure"),
    };
    let channels = ChannelFactory::new(ChannelSettings::default(), transport)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Arc::new(RemoteGrantor::new(
        channels,
        args.allocators.clone(),
        3,
    )))
}

fn load_rules(args: &Args) -> Result<(RuleSource, EnvoyConfig)> {
    let envoy = match &args.ratelimit_config {
        Some(p) if p.is_dir() => EnvoyConfig::load_dir(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            EnvoyConfig::from_yaml(&p.display().to_string(), &text)
                .map_err(|e| anyhow::anyhow!("{e}"))?
        }
        None => EnvoyConfig::default(),
    };
    let mut policies = Vec::new();
    for p in &args.policies {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        policies
            .push(Policy::from_yaml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?);
    }
    let mut rules = RuleSource::from_policies(policies);
    rules.envoy = Some(envoy.clone());
    Ok((rules, envoy))
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

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    if !args.standalone && args.allocators.is_empty() {
        bail!("give --allocator ADDR (repeatable) to lease from a cluster, or --standalone");
    }
    let (rules, envoy) = load_rules(&args)?;
    let clock = SystemClock::new();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(rules)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let (tx, rx) = tokio::sync::watch::channel(false);
    let queue = engine.take_acquire_queue().context("acquire queue")?;
    let grantor = grantor(&args)?;
    let mut manager_cfg = ManagerConfig::new(args.holder_id.clone());
    manager_cfg.state_file = args.state_file.clone();
    let manager = LeaseManager::open(manager_cfg, grantor, clock.clone(), queue)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .with_engine(Arc::clone(&engine));
    let manager_task = tokio::spawn(manager.run(rx.clone()));
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let rls = RateLimitServiceServer::new(RlsServer::new(
        Arc::clone(&engine),
        Arc::new(envoy),
        clock.clone(),
        args.response_headers,
    ));
    let admit = AdmitServiceServer::new(AdmitServer::new(Arc::clone(&engine), clock.clone()));
    let grpc = tonic::transport::Server::builder()
        .add_service(rls)
        .add_service(admit);
    let grpc_task = match args.grpc_addr.strip_prefix("unix:") {
        Some(path) => {
            let _ = std::fs::remove_file(path);
            let l =
                tokio::net::UnixListener::bind(path).with_context(|| format!("binding {path}"))?;
            tokio::spawn(grpc.serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(l),
                stopped(rx.clone()),
            ))
        }
        None => {
            let l = tokio::net::TcpListener::bind(&args.grpc_addr)
                .await
                .with_context(|| format!("binding {}", args.grpc_addr))?;
            tracing::info!(addr = %l.local_addr()?, "gRPC (Envoy RLS) listening");
            tokio::spawn(grpc.serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(l),
                stopped(rx.clone()),
            ))
        }
    };
    let router = http::router(Arc::clone(&engine), clock);
    let http_task = match args.http_addr.strip_prefix("unix:") {
        Some(path) => {
            let _ = std::fs::remove_file(path);
            let l =
                tokio::net::UnixListener::bind(path).with_context(|| format!("binding {path}"))?;
            tokio::spawn(async move {
                axum::serve(l, router)
                    .with_graceful_shutdown(stopped(rx))
                    .await
                    .map_err(anyhow::Error::from)
            })
        }
        None => {
            let l = tokio::net::TcpListener::bind(&args.http_addr)
                .await
                .with_context(|| format!("binding {}", args.http_addr))?;
            tracing::info!(addr = %l.local_addr()?, "HTTP listening");
            tokio::spawn(async move {
                axum::serve(l, router)
                    .with_graceful_shutdown(stopped(rx))
                    .await
                    .map_err(anyhow::Error::from)
            })
        }
    };
    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = tx.send(true);
    let _ = grpc_task.await;
    let _ = http_task.await;
    let settled = manager_task.await.context("lease manager")?;
    tracing::info!(
        releases = settled.releases,
        reclaimed = settled.reclaimed,
        "leases released"
    );
    Ok(())
}
