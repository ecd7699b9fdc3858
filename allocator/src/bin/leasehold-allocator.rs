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

fn init_tracing(json: bool) {
    // openraft logs whole states at INFO, on many lines; its warnings and errors are kept.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    // Colour codes only for a terminal: a log file or collector gets plain text. The log
    // goes to standard output, so that is the stream to ask.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
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
    server::run(cfg, rx).await?;
    Ok(())
}
