//! A delegated region between the global allocators and the agents: a single-node Raft
//! cluster with a delegated ledger that leases from the global cluster through the
//! production upstream driver and follows its policies through the production mirror,
//! both over simulated TCP, and sub-leases to the agents.

use super::cluster::{bootstrap, start_node, ClusterShared, NodeSpec, ALLOCATOR_PORT};
use super::hosts::HostResult;
use super::transport::sim_channels;
use super::NetConfig;
use leasehold_allocator::service::ticker::run_ticker;
use leasehold_allocator::upstream::mirror::{run_mirror, MirrorConfig};
use leasehold_allocator::upstream::{run_upstream, UpstreamConfig, UpstreamCounters};
use leasehold_client::RemoteGrantor;
use leasehold_common::lease::LeaseVerifier;
use leasehold_common::ledger::LedgerConfig;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The region's host name, and its cluster's name.
pub const REGION_HOST: &str = "region-1";
pub const REGION_CLUSTER: &str = "region";

/// Where agents reach the region.
pub fn region_addr() -> String {
    format!("{REGION_HOST}:{ALLOCATOR_PORT}")
}

/// The program of the region host: starts (or restarts) its node, bootstraps it on first
/// start, leases from and mirrors the global cluster, and proposes expiry ticks.
pub async fn region(cfg: NetConfig, shared: ClusterShared) -> HostResult {
    let spec = NodeSpec {
        host: REGION_HOST.into(),
        node_id: 1,
        addr: region_addr(),
        cluster_name: REGION_CLUSTER.into(),
        ledger: LedgerConfig::delegated(REGION_CLUSTER),
    };
    let node = start_node(&spec, &cfg, &shared, Arc::clone(&shared.region_signer)).await?;
    shared.region.set(0, node.clone());
    bootstrap(&node, BTreeMap::from([(1, region_addr())]), None).await?;
    let global = cfg.global_addrs();
    let channels = sim_channels;
    // Upstream leases must carry the global cluster's signature.
    let mut verifier = LeaseVerifier::new();
    verifier.trust(shared.signer.public_key())?;
    let up = UpstreamConfig::new(REGION_CLUSTER);
    let grantor = Arc::new(RemoteGrantor::new(
        channels()?,
        global.clone(),
        global.len() + 1,
    ));
    tokio::task::spawn_local(run_upstream(
        node.clone(),
        grantor,
        Some(verifier),
        up.clone(),
        Arc::new(UpstreamCounters::default()),
        std::future::pending(),
    ));
    let mirror = MirrorConfig {
        channels: channels()?,
        addrs: global,
        holder_id: up.holder_id,
        silence_max_ms: 2_000,
        retry_ms: up.retry_ms,
    };
    tokio::task::spawn_local(run_mirror(node.clone(), mirror, std::future::pending()));
    run_ticker(node, 100, std::future::pending()).await;
    Ok(())
}
