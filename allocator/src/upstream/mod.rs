//! A delegated (region or cell) allocator's side of its upstream: it holds one lease per key
//! from the upstream cluster, through the same client the agents use, and sub-leases only
//! that credit.
//!
//! The driver runs on every node and acts only while its node leads: each round it reads
//! the replicated ledger, [plans](plan::plan) a step per key, and carries them out: acquire,
//! report (which renews and gives idle credit back), close an expired lease, or release a
//! key nobody uses. The round's calls upstream leave together in one `LeaseBatch`, which
//! the upstream applies as one replicated command. What it learns from upstream enters the
//! ledger as replicated commands (`UpstreamGranted`, `UpstreamReturn`, `UpstreamClosed`), so
//! a new leader continues from exactly where the old one stopped. Policies and emergency
//! switches follow the upstream's watch stream ([`mirror`]).

mod exchange;
pub mod mirror;
pub mod plan;
mod round;
mod send;

use crate::replica::Replica;
use crate::state::AllocatorState;
use exchange::Exchange;
use leasehold_client::Grantor;
use leasehold_common::lease::{HolderConfig, LeaseVerifier};
use leasehold_proto::transport::ChannelSettings;
use plan::PlanSettings;
use round::{round, Memory};
use send::BatchSender;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How a delegated allocator holds credit from its upstream.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// The holder id this cluster uses upstream: `alloc:<cluster>`.
    pub holder_id: String,
    /// How often the driver looks at its keys.
    pub tick_ms: u64,
    /// Wait before asking again after a denial or an unreachable upstream (unless the
    /// upstream named a longer wait).
    pub retry_ms: u64,
    pub plan: PlanSettings,
    /// Clock drift and safety margin that shorten every upstream lease's deadline.
    pub holder: HolderConfig,
}

impl UpstreamConfig {
    pub fn new(cluster: &str) -> Self {
        UpstreamConfig {
            holder_id: format!("{}{cluster}", crate::service::auth::ALLOCATOR_HOLDER_PREFIX),
            tick_ms: 50,
            retry_ms: 250,
            plan: PlanSettings::default(),
            holder: HolderConfig::default(),
        }
    }
}

/// How a delegated node's calls to its upstream cluster are timed. The upstream answers in
/// milliseconds, and while a call waits on a lost leader every key behind it in the round
/// waits too, so each call gives up on a node well within the second a new leader takes
/// to be elected and named.
pub fn upstream_channel_settings() -> ChannelSettings {
    ChannelSettings {
        connect_timeout_ms: UPSTREAM_CONNECT_TIMEOUT_MS,
        request_timeout_ms: UPSTREAM_REQUEST_TIMEOUT_MS,
        keepalive_interval_ms: UPSTREAM_KEEPALIVE_INTERVAL_MS,
        keepalive_timeout_ms: UPSTREAM_KEEPALIVE_TIMEOUT_MS,
        ..ChannelSettings::default()
    }
}

/// Resolving an upstream node's name and connecting to it take at most this long, and its
/// TLS handshake as long again.
pub const UPSTREAM_CONNECT_TIMEOUT_MS: u64 = 500;
/// A call to an upstream node that has not answered within this long is given up on and
/// sent to the next node (with the same request id, so it is applied at most once).
pub const UPSTREAM_REQUEST_TIMEOUT_MS: u64 = 1_000;
/// Each connection to an upstream node sends a PING this often.
pub const UPSTREAM_KEEPALIVE_INTERVAL_MS: u64 = 250;
/// A PING unanswered this long closes its connection, failing the calls on it: a node that
/// stopped answering without closing its connections (a host gone, a stopped process) is
/// noticed within interval + timeout, a second, even when a call on it would wait longer.
pub const UPSTREAM_KEEPALIVE_TIMEOUT_MS: u64 = 750;

/// Counters of the driver, for metrics and tests.
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    pub acquired: std::sync::atomic::AtomicU64,
    pub reports: std::sync::atomic::AtomicU64,
    pub denied: std::sync::atomic::AtomicU64,
    pub unreachable: std::sync::atomic::AtomicU64,
    pub expired: std::sync::atomic::AtomicU64,
    pub released: std::sync::atomic::AtomicU64,
    pub returned_units: std::sync::atomic::AtomicU64,
    /// `LeaseBatch` calls sent upstream (each carries the calls of many keys).
    pub batch_calls: std::sync::atomic::AtomicU64,
}

/// Runs the driver until `shutdown` completes.
pub async fn run_upstream<R: Replica<AllocatorState>>(
    replica: R,
    grantor: Arc<dyn Grantor>,
    verifier: Option<LeaseVerifier>,
    cfg: UpstreamConfig,
    counters: Arc<UpstreamCounters>,
    shutdown: impl Future<Output = ()>,
) {
    let sender = BatchSender::new(grantor, cfg.holder_id.clone(), Arc::clone(&counters));
    let ex = Exchange::new(replica, verifier, cfg.clone(), counters);
    let mut memory = Memory::default();
    let mut every = tokio::time::interval(Duration::from_millis(cfg.tick_ms.max(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = every.tick() => round(&ex, &sender, &mut memory, &cfg).await,
        }
    }
}
