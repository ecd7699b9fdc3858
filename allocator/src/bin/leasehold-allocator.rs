//! `leasehold-allocator`: one node of an allocator cluster at any level.

use anyhow::{Context, Result};
use clap::Parser;
use leasehold_allocator::config::AllocatorConfig;
use leasehold_allocator::server;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "leasehold-allocator",
    version,
    about = "A Leasehold allocator node"
)]
struct Args {
    /// YAML configuration file (see deploy/config/).
    #[arg(long, short = 'c', env = "LEASEHOLD_ALLOCATOR_CONFIG")]
    config: PathBuf,
    /// Overrides `node_id`.
    #[arg(long)]
    node_id: Option<u64>,
    /// Overrides `grpc_addr` (Raft, lease and admin services).
    #[arg(long)]
    grpc_addr: Option<SocketAddr>,
    /// Overrides `http_addr` (/metrics, /healthz, /readyz).
    #[arg(long)]
    http_addr: Option<SocketAddr>,
    /// Overrides `data_dir`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Run without TLS or client authentication: local development only.
    #[arg(long)]
    insecure: bool,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

/// The log filter when `RUST_LOG` is unset. openraft's replication streams log every failed
/// RPC (at ERROR and WARN) every heartbeat while a peer is down or slow; the node's own
/// Raft transport logs a peer that stops answering once, at WARN, and once more when it
/// answers again.
const DEFAULT_LOG_FILTER: &str =
    "info,openraft=warn,openraft::replication=off,openraft::engine::handler::replication_handler=error";

/// openraft's ERROR line for each vote request and each leadership check that a peer did
/// not answer (its only ERROR events carrying both a `target` peer and an `error`): while a
/// peer is down that is one line per election round or per linearizable read. The node's
/// Raft transport reports the peer once instead.
fn is_peer_call_error(m: &tracing::Metadata<'_>) -> bool {
    m.target() == "openraft::core::raft_core"
        && *m.level() == tracing::Level::ERROR
        && m.fields().field("target").is_some()
        && m.fields().field("error").is_some()
}

fn init_tracing(json: bool) {
    use tracing_subscriber::prelude::*;
    // openraft logs whole states at INFO, on many lines; its warnings and errors are kept.
    // An explicit RUST_LOG shows everything it asks for, the per-call lines included.
    let (filter, quiet) = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, false),
        Err(_) => (tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER), true),
    };
    let keep = tracing_subscriber::filter::filter_fn(move |m| !(quiet && is_peer_call_error(m)));
    // Colour codes only for a terminal: a log file or collector gets plain text. The log
    // goes to standard output, so that is the stream to ask.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        let layer = tracing_subscriber::fmt::layer().json().with_ansi(ansi);
        registry.with(layer.with_filter(keep)).init();
    } else {
        let layer = tracing_subscriber::fmt::layer().with_ansi(ansi);
        registry.with(layer.with_filter(keep)).init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    init_tracing(args.log_json);
    let mut cfg = AllocatorConfig::load(&args.config)?;
    if let Some(v) = args.node_id {
        cfg.node_id = v;
    }
    if let Some(v) = args.grpc_addr {
        cfg.grpc_addr = v;
    }
    if let Some(v) = args.http_addr {
        cfg.http_addr = v;
    }
    if let Some(v) = args.data_dir {
        cfg.data_dir = v;
    }
    if args.insecure {
        cfg.insecure = true;
        cfg.tls = None;
    }
    cfg.validate().context("configuration after flags")?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = tx.send(true);
    });
    leasehold_proto::heap::spawn_trim();
    server::run(cfg, rx).await?;
    Ok(())
}
