//! The software of the simulated hosts: the production lease service on a single-node
//! allocator host (the Raft cluster's hosts are in [`super::cluster`]), and on each agent
//! host the production engine, lease manager and gRPC grantor client, plus a traffic loop
//! that offers more than the policy's rate.
//!
//! Each function is the whole program of a host: turmoil calls it again when a crashed
//! host restarts, so it builds everything from scratch, as a restarted process would, from
//! what its disk holds (an agent's state file, when the run gives agents one).

use super::accounting::Accounts;
use super::check::{Admission, TrafficLog};
use super::clock::{sim_now_ns, ClockOffsets, SteppedClock};
use super::cluster::ALLOCATOR_PORT;
use super::demand::Offers;
use super::receipts::{LeaseReceipts, ReceiptGrantor};
use super::rollout::RolloutShared;
use super::spray::Sprayer;
use super::transport::{incoming, sim_channels};
use super::{NetConfig, RESTRICTED_PRIORITY};
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, EngineLimits, Outcome, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig};
use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::service::ticker::run_ticker;
use leasehold_allocator::service::ClusterControl;
use leasehold_allocator::service::{AdminServer, LeaseServer, SingleNode, WatchSettings};
use leasehold_allocator::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_client::{Grantor, RemoteGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::LedgerConfig;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, Nanos, TokioClock};
use leasehold_proto::leasehold::v1::admin_service_server::AdminServiceServer;
use leasehold_proto::leasehold::v1::lease_service_server::LeaseServiceServer;
use leasehold_proto::transport::{AuthMode, PeerIdentity, Role};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The policy key every agent admits under.
pub const TENANT: &str = "acme";

/// Result of a host's software, as turmoil takes it.
pub type HostResult = turmoil::Result;

/// The name of agent `i`'s host (also its holder id).
pub fn agent_host(i: usize) -> String {
    format!("agent-{i}")
}

/// The production lease service over `replica` as the simulation serves it: without TLS,
/// every caller taken for an agent, watch streams polled every 50 ms.
pub(super) fn lease_server<R: Replica<AllocatorState>>(
    replica: R,
    signer: Arc<LeaseSigner>,
) -> Result<LeaseServer<R>, Box<dyn std::error::Error>> {
    let assumed = PeerIdentity::new(Role::Agent, "simulated-agent")?;
    Ok(LeaseServer::new(
        replica,
        signer,
        AuthMode::Insecure { assumed },
        WatchSettings {
            poll_ms: 50,
            heartbeat_ms: 1_000,
            ..WatchSettings::default()
        },
    ))
}

/// The production admin service over `replica` as the simulation serves it: without TLS,
/// every caller taken for an administrator (the simulation's admin host is the only one).
pub(super) fn admin_server<R: Replica<AllocatorState>>(
    replica: R,
    cluster: Arc<dyn ClusterControl>,
) -> Result<AdminServer<R>, Box<dyn std::error::Error>> {
    let assumed = PeerIdentity::new(Role::Admin, "simulated-admin")?;
    Ok(AdminServer::new(
        replica,
        AuthMode::Insecure { assumed },
        cluster,
    ))
}

/// Serves the lease and admin services on a single-node replica with the run's policy installed,
/// and proposes expiry ticks, until the simulation ends.
pub async fn allocator(
    cfg: NetConfig,
    replica_out: Arc<Mutex<Option<LocalReplica<AllocatorState>>>>,
    signer: Arc<LeaseSigner>,
) -> HostResult {
    // Windows are aligned to UNIX time on the ledger's timeline: a window policy's ledger
    // needs the calendar, not a clock that starts at zero.
    let clock: Arc<dyn Clock> = match cfg.window {
        Some(_) => Arc::new(SimCalendarClock),
        None => Arc::new(TokioClock::new()),
    };
    let replica = LocalReplica::new(AllocatorState::new(ledger_config(&cfg)), clock);
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
    let service = lease_server(replica.clone(), signer)?;
    let cluster = Arc::new(SingleNode {
        cluster_id: "global".into(),
        level: "global".into(),
        node_id: 1,
        addr: super::cluster::allocator_addr(0),
    });
    let admin = admin_server(replica.clone(), cluster)?;
    tokio::task::spawn_local(run_ticker(replica, 100, std::future::pending()));
    tonic::transport::Server::builder()
        .add_service(LeaseServiceServer::new(service))
        .add_service(AdminServiceServer::new(admin))
        .serve_with_incoming(incoming(ALLOCATOR_PORT).await?)
        .await?;
    Ok(())
}

/// The simulation's calendar (its start instant plus simulated time), as a ledger clock.
#[derive(Clone, Copy, Debug)]
struct SimCalendarClock;

impl Clock for SimCalendarClock {
    fn now(&self) -> Nanos {
        let since = turmoil::since_epoch().unwrap_or_default();
        Nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The single-node allocator's ledger: a root, with the run's key cap if it sets one.
fn ledger_config(cfg: &NetConfig) -> LedgerConfig {
    let mut out = LedgerConfig::root("global");
    if let Some(keys_max) = cfg.grantor_keys_max {
        out.limits.keys_max = keys_max;
    }
    out
}

/// What an agent host shares with the run: the traffic log, and its clock offset.
#[derive(Clone)]
pub struct AgentShared {
    pub log: Arc<Mutex<TrafficLog>>,
    pub clocks: ClockOffsets,
    /// How many times each agent's software started.
    pub starts: Arc<Vec<AtomicU32>>,
    /// When each agent first received each of its leases.
    pub receipts: LeaseReceipts,
    /// Where the hosts' disks are, when agents keep a state file: agent `i`'s is under
    /// `agent-i/` and outlives its crashes.
    pub disk_root: Option<PathBuf>,
    /// Where each agent notes the policy version its engine enforces.
    pub rollout: RolloutShared,
    /// The run's seed, from which each agent works out its share of the traffic.
    pub seed: u64,
    /// Each agent run's decisions, to compare with its engine's counters (P7).
    pub accounts: Accounts,
}

/// Runs agent `index`: leases credit from the allocator hosts over the simulated network
/// and admits `cfg.offer_per_round` requests every `cfg.offer_every_ms`, logging each
/// admission at the simulation's time. Every clock the agent's code reads is the host's
/// clock, which the fault schedule may step.
pub async fn agent(index: usize, cfg: NetConfig, shared: AgentShared) -> HostResult {
    let start = shared
        .starts
        .get(index)
        .map_or(0, |n| n.fetch_add(1, Ordering::SeqCst) + 1);
    let clock = match cfg.clock_steps_monotonic {
        true => shared.clocks.clock(index),
        false => shared.clocks.clock(index).steady(),
    };
    let policy = Policy::from_yaml(&cfg.policy_yaml())?;
    let wall = clock.clone();
    let mut limits = EngineLimits::default();
    if let Some(keys_max) = cfg.agent_keys_max {
        limits.keys_max = keys_max;
        limits.shards = limits.shards.min(keys_max);
    }
    if let Some(idle_ms) = cfg.agent_key_idle_ms {
        limits.key_idle_ns = idle_ms.saturating_mul(1_000_000);
    }
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .limits(limits)
            .wall_clock(move || stepped_wall_clock(&wall))
            .build(RuleSource::from_policies(vec![policy]))?,
    );
    shared
        .accounts
        .started(index, start, Arc::clone(&engine), &cfg.policy_id);
    let channels = sim_channels()?;
    let addrs = cfg.agent_addrs();
    let retries_max = addrs.len() + 1;
    let remote: Arc<dyn Grantor> = Arc::new(RemoteGrantor::new(channels, addrs, retries_max));
    let grantor = Arc::new(ReceiptGrantor {
        inner: remote,
        agent: index as u32,
        receipts: shared.receipts.clone(),
    });
    let mut mcfg = ManagerConfig::new(agent_host(index));
    mcfg.report_every_ms = cfg.report_every_ms;
    mcfg.retry_ms = 100;
    if let Some(h) = cfg.holder_refresh_horizon_ms {
        mcfg.holder.refresh_horizon_ms = h;
    }
    mcfg.state_file = shared
        .disk_root
        .as_ref()
        .map(|root| root.join(agent_host(index)).join("state"));
    let queue = engine
        .take_acquire_queue()
        .ok_or("the engine's acquire queue was already taken")?;
    // With a state file, the manager first releases the leases of the host's previous run.
    let manager =
        LeaseManager::open(mcfg, grantor, clock.clone(), queue)?.with_engine(Arc::clone(&engine));
    // The manager runs until the host crashes or the simulation ends.
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    tokio::task::spawn_local(manager.run(stopped));
    offer_traffic(index, &cfg, &engine, &clock, &shared).await;
    Ok(())
}

/// The host's calendar time: the simulation's (its fixed epoch plus simulated time) shifted
/// by the host's clock offset, for calendar quotas and `effective_at`, so that no decision
/// reads the machine's real clock.
fn stepped_wall_clock(clock: &SteppedClock) -> jiff::Timestamp {
    let since = turmoil::since_epoch().unwrap_or_default();
    let ns = clock.shift(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX));
    jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

async fn offer_traffic(
    index: usize,
    cfg: &NetConfig,
    engine: &Engine,
    clock: &SteppedClock,
    shared: &AgentShared,
) {
    let mut every = tokio::time::interval(Duration::from_millis(cfg.offer_every_ms.max(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let entries = [("tenant", TENANT)];
    let dims = [Dimension::policy(&cfg.policy_id, &entries)];
    let mut offers = Offers::new(shared.seed, index, cfg.agents, cfg.offer_per_round);
    let mut sprayer = Sprayer::default();
    let mut sent = 0u64;
    loop {
        every.tick().await;
        let at_ns = sim_now_ns();
        if cfg.rollout.is_some() {
            note_version(index, cfg, engine, at_ns, &shared.rollout);
        }
        let n = offers.next(&cfg.demand, at_ns / 1_000_000);
        let mut log = shared.log.lock().unwrap_or_else(|e| e.into_inner());
        let at_ms = at_ns / 1_000_000;
        sprayer.round(
            index,
            cfg,
            engine,
            clock,
            at_ms,
            &shared.accounts,
            &mut log.spray,
        );
        for _ in 0..n {
            log.offered += 1;
            let mut req = AdmitRequest::new(&dims);
            // Every fifth request is critical, for policies that restrict to those.
            if sent.is_multiple_of(5) {
                req.priority = RESTRICTED_PRIORITY;
            }
            sent += 1;
            let decision = engine.admit(&req, clock.now());
            let outcome = decision
                .results
                .first()
                .map_or(Outcome::Skipped, |r| r.outcome);
            shared.accounts.count(index, outcome);
            let admission = Admission {
                at_ns,
                agent: index as u32,
            };
            match outcome {
                Outcome::Admitted => log.admissions.push(admission),
                Outcome::FailOpen | Outcome::Restricted => log.uncharged.push(admission),
                _ => {}
            }
        }
    }
}

/// Notes the version of the run's policy the engine enforces now.
fn note_version(index: usize, cfg: &NetConfig, engine: &Engine, at_ns: u64, to: &RolloutShared) {
    let version = engine
        .stats()
        .policies
        .iter()
        .find(|p| p.policy_id == cfg.policy_id)
        .map_or(0, |p| p.version);
    to.agent_version(index, at_ns, version);
}
