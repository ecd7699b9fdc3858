//! The software of the simulated hosts: the production lease service on the allocator
//! host, and on each agent host the production engine, lease manager and gRPC grantor
//! client, plus a traffic loop that offers more than the policy's rate.
//!
//! Each function is the whole program of a host: turmoil calls it again when a crashed
//! host restarts, so it builds everything from scratch, as a restarted process would.

use super::check::{Admission, TrafficLog};
use super::transport::{connect_sim, incoming};
use super::NetConfig;
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig, RemoteGrantor};
use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::service::ticker::run_ticker;
use leasehold_allocator::service::{LeaseServer, WatchSettings};
use leasehold_allocator::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::LedgerConfig;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, TokioClock};
use leasehold_proto::leasehold::v1::lease_service_server::LeaseServiceServer;
use leasehold_proto::transport::{
    AuthMode, ChannelFactory, ChannelSettings, ClientTransport, PeerIdentity, Role,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The allocator's host name and gRPC port.
pub const ALLOCATOR_HOST: &str = "allocator";
pub const ALLOCATOR_PORT: u16 = 7000;

/// The policy key every agent admits under.
pub const TENANT: &str = "acme";

/// Result of a host's software, as turmoil takes it.
pub type HostResult = turmoil::Result;

/// The name of agent `i`'s host (also its holder id).
pub fn agent_host(i: usize) -> String {
    format!("agent-{i}")
}

/// Serves the lease service on a single-node replica with the run's policy installed,
/// and proposes expiry ticks, until the simulation ends.
pub async fn allocator(
    cfg: NetConfig,
    replica_out: Arc<Mutex<Option<LocalReplica<AllocatorState>>>>,
) -> HostResult {
    let replica = LocalReplica::new(
        AllocatorState::new(LedgerConfig::root("global")),
        Arc::new(TokioClock::new()),
    );
    let applied = replica
        .propose(StateCommand::ApplyPolicy {
            yaml: cfg.policy_yaml(),
            shadow: false,
            effective_at_ns: 0,
            actor: "simulation".into(),
        })
        .await?;
    if let StateOutput::Refused(e) = applied {
        return Err(format!("policy refused: {e}").into());
    }
    *replica_out.lock().unwrap_or_else(|e| e.into_inner()) = Some(replica.clone());
    // A fresh key per run: signatures differ between runs, but nothing in the run reads
    // them (agents do not check them yet) and their length is fixed.
    let signer = Arc::new(LeaseSigner::generate(&ring::rand::SystemRandom::new())?);
    let assumed = PeerIdentity::new(Role::Agent, "simulated-agent")?;
    let service = LeaseServer::new(
        replica.clone(),
        signer,
        AuthMode::Insecure { assumed },
        WatchSettings {
            poll_ms: 50,
            heartbeat_ms: 1_000,
            ..WatchSettings::default()
        },
    );
    tokio::task::spawn_local(run_ticker(replica, 100, std::future::pending()));
    tonic::transport::Server::builder()
        .add_service(LeaseServiceServer::new(service))
        .serve_with_incoming(incoming(ALLOCATOR_PORT).await?)
        .await?;
    Ok(())
}

/// Runs agent `index`: leases credit from the allocator over the simulated network and
/// admits `cfg.offer_per_round` requests every `cfg.offer_every_ms`, logging each
/// admission at the simulation's time.
pub async fn agent(index: usize, cfg: NetConfig, log: Arc<Mutex<TrafficLog>>) -> HostResult {
    let clock = TokioClock::new();
    let policy = Policy::from_yaml(&cfg.policy_yaml())?;
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .wall_clock(simulated_wall_clock)
            .build(RuleSource::from_policies(vec![policy]))?,
    );
    let settings = ChannelSettings {
        connect_timeout_ms: 500,
        request_timeout_ms: 1_000,
        ..ChannelSettings::default()
    };
    let channels =
        ChannelFactory::new(settings, ClientTransport::Plaintext)?.with_connector(connect_sim);
    let grantor = Arc::new(RemoteGrantor::new(
        channels,
        vec![format!("{ALLOCATOR_HOST}:{ALLOCATOR_PORT}")],
        2,
    ));
    let mut mcfg = ManagerConfig::new(agent_host(index));
    mcfg.report_every_ms = 200;
    mcfg.retry_ms = 100;
    let queue = engine
        .take_acquire_queue()
        .ok_or("the engine's acquire queue was already taken")?;
    let manager =
        LeaseManager::new(mcfg, grantor, clock.clone(), queue).with_engine(Arc::clone(&engine));
    // The manager runs until the host crashes or the simulation ends.
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    tokio::task::spawn_local(manager.run(stopped));
    offer_traffic(index, &cfg, &engine, &clock, &log).await;
    Ok(())
}

/// The simulation's calendar time (its fixed epoch plus simulated time), for calendar
/// quotas and `effective_at`, so that no decision reads the host's real clock.
fn simulated_wall_clock() -> jiff::Timestamp {
    let since = turmoil::since_epoch().unwrap_or_default();
    jiff::Timestamp::from_nanosecond(since.as_nanos() as i128)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

async fn offer_traffic(
    index: usize,
    cfg: &NetConfig,
    engine: &Engine,
    clock: &TokioClock,
    log: &Mutex<TrafficLog>,
) {
    let mut every = tokio::time::interval(Duration::from_millis(cfg.offer_every_ms.max(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let entries = [("tenant", TENANT)];
    let dims = [Dimension::policy(&cfg.policy_id, &entries)];
    loop {
        every.tick().await;
        let at = turmoil::sim_elapsed().unwrap_or_default();
        let at_ns = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..cfg.offer_per_round {
            log.offered += 1;
            if engine.admit(&AdmitRequest::new(&dims), clock.now()).allowed {
                log.admissions.push(Admission {
                    at_ns,
                    agent: index as u32,
                });
            }
        }
    }
}
