//! Builds the simulated world from a seed, steps it while applying the fault schedule,
//! and checks the admission log.

use super::accounting::Accounts;
use super::apply::World;
use super::check::{check_admissions, TrafficLog};
use super::clock::ClockOffsets;
use super::cluster::{self, allocator_host, ClusterShared, NodeSlots};
use super::expiry::check_expiry;
use super::faults::{schedule, Action, FaultSpec, Scheduled};
use super::hosts::{self, agent_host, AgentShared};
use super::receipts::LeaseReceipts;
use super::region::{self, REGION_HOST};
use super::rollout::{self, RolloutShared, ADMIN_HOST};
use super::settle::{self, Books, CrashLedger};
use super::sockets;
use super::timeline::{grantor_now_ns, Timeline};
use super::window_check::check_windows;
use super::{GrantorBooks, NetConfig, NetError, NetReport};
use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::state::AllocatorState;
use leasehold_common::lease::LeaseSigner;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Separates the fault schedule's rng stream from turmoil's, which gets the seed itself.
const SCHEDULE_SALT: u64 = 0x6e65_745f_6661_756c;
/// turmoil's step, in milliseconds of simulated time.
const TICK_MS: u64 = 1;
/// turmoil's default TCP capacity: connections queued at a listener, and segments queued
/// on a stream.
const TCP_CAPACITY_DEFAULT: usize = 64;
/// Connections one agent may open to a grantor at once (its lease calls and its watch
/// stream, with room for a reconnect).
const CONNECTIONS_PER_AGENT_MAX: usize = 4;
/// Faults start this long after the start and are all repaired this long before the end.
pub(super) const QUIET_MS: u64 = 1_000;
/// How often the grantor's key count is sampled for its peak, in milliseconds.
const KEYS_SAMPLE_EVERY_MS: u64 = 100;

/// The allocator side of a run, for the check at its end.
struct Allocators {
    /// The single-node global allocator's replica, when the global allocator is one host.
    single: Option<Arc<Mutex<Option<LocalReplica<AllocatorState>>>>>,
    /// The Raft nodes (global and region) and the signing keys.
    shared: ClusterShared,
    /// The directory that holds every host's disk, removed when dropped.
    _disks: tempfile::TempDir,
}

/// Runs `cfg` under `seed` to the end of its duration.
pub fn run(seed: u64, cfg: &NetConfig) -> Result<NetReport, NetError> {
    cfg.validate()?;
    let cfg = &with_drawn_rollout(seed, cfg);
    let failed = |at_ms: u64, reason: String| NetError::Failed {
        seed,
        at_ms,
        reason,
    };
    // Every simulated host runs on this thread; fsyncs (Raft storage, agents' state files) on
    // tokio's blocking pool would finish at moments of real time the simulated clock cannot
    // order.
    leasehold_allocator::storage::error::run_blocking_inline_on_this_thread();
    leasehold_agent::lease::run_blocking_inline_on_this_thread();
    sockets::reset();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(std::time::UNIX_EPOCH + Duration::from_secs(cfg.start_unix_s))
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_millis(cfg.duration_ms + QUIET_MS))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(cfg.latency_ms_base))
        .tcp_capacity(tcp_capacity(cfg.agents))
        .build();
    let allocators = add_allocators(&mut sim, cfg).map_err(|e| failed(0, e))?;
    let agents = AgentShared {
        log: Arc::new(Mutex::new(TrafficLog::default())),
        clocks: ClockOffsets::new(cfg.agents),
        starts: Arc::new((0..cfg.agents).map(|_| AtomicU32::new(0)).collect()),
        receipts: LeaseReceipts::default(),
        disk_root: cfg.agent_state.then(|| allocators.shared.data_root.clone()),
        rollout: RolloutShared::new(cfg.agents),
        seed,
        accounts: Accounts::new(cfg.agents),
    };
    if let Some(spec) = cfg.rollout {
        let (c, r) = (cfg.clone(), agents.rollout.clone());
        sim.host(ADMIN_HOST, move || {
            rollout::admin(c.clone(), spec, r.clone())
        });
    }
    for i in 0..cfg.agents {
        let (cfg, shared) = (cfg.clone(), agents.clone());
        sim.host(agent_host(i), move || {
            hosts::agent(i, cfg.clone(), shared.clone())
        });
    }
    let plan = plan(seed, cfg);
    let nodes = (cfg.cluster > 1).then(|| allocators.shared.nodes.clone());
    let agent_peers = match cfg.region {
        true => vec![REGION_HOST.to_string()],
        false => (0..cfg.cluster).map(allocator_host).collect(),
    };
    let mut world = World::new(
        cfg.agents,
        cfg.cluster,
        agent_peers,
        agents.clocks.clone(),
        nodes,
    );
    let books = grantor_books(cfg, &allocators);
    let mut crashes = CrashLedger::default();
    let mut in_flight_at_crash = Vec::new();
    let mut grantor_keys_peak = 0;
    let mut timeline = Timeline::default();
    let mut next = 0;
    loop {
        let now_ms = sim.elapsed().as_millis() as u64;
        if now_ms >= cfg.duration_ms {
            break;
        }
        world.observe_leader(now_ms);
        while let Some(s) = plan.get(next).filter(|s| s.at_ms <= now_ms) {
            if s.action == Action::CrashLeader {
                in_flight_at_crash.push((now_ms, agents.receipts.in_flight()));
            }
            let noting = Noting {
                books: &books,
                crashes: &mut crashes,
                region: cfg.region,
            };
            noting.apply(&mut world, &mut sim, now_ms, s.action, cfg.latency_ms_base);
            next += 1;
        }
        sim.step().map_err(|e| failed(now_ms, e.to_string()))?;
        if cfg.window.is_some() {
            // Stamped by the end of this step, whichever host applied it when within it.
            let stepped_ns = (now_ms + TICK_MS) * 1_000_000;
            if let Some(v) = grantor_now_ns(&books, |i| world.allocator_up(i)) {
                timeline.observe(stepped_ns, v);
            }
        }
        follow_crashed_leases(&books, &mut crashes, &world, cfg.region);
        if now_ms.is_multiple_of(KEYS_SAMPLE_EVERY_MS) {
            let keys = read_books(&books, &world, cfg.region, |l| l.accounts().count());
            grantor_keys_peak = grantor_keys_peak.max(keys.unwrap_or(0));
        }
        pause_in_real_time(cfg, now_ms);
    }
    let noted = crashes.noted();
    let closings = read_books(&books, &world, cfg.region, move |l| {
        settle::closings(l, &noted)
    })
    .unwrap_or_default();
    let agents_n = cfg.agents;
    let books_versions = match cfg.rollout {
        Some(_) => read_books(&books, &world, cfg.region, move |l| {
            rollout::books_versions(l, agents_n)
        })
        .unwrap_or_default(),
        None => Default::default(),
    };
    let policy_id = cfg.policy_id.clone();
    let grantor = read_books(&books, &world, cfg.region, move |l| {
        GrantorBooks::read(l, &policy_id)
    });
    let (accounts_checked, miscounts) = agents.accounts.finish(&cfg.policy_id);
    let ledger_conserved =
        all_conserved(cfg, &allocators, &world).map_err(|e| failed(cfg.duration_ms, e))?;
    // The nodes' storage goes only after the simulation, which owns their runtimes.
    drop(sim);
    drop(allocators);
    let traffic = std::mem::take(&mut *agents.log.lock().unwrap_or_else(|e| e.into_inner()));
    let mut admissions = traffic.admissions;
    admissions.sort_unstable();
    let mut uncharged = traffic.uncharged;
    uncharged.sort_unstable();
    let expiry = check_expiry(&admissions, &agents.receipts, cfg.agents);
    let settlements = crashes.settle(&closings, &agents.receipts, &admissions);
    let rollout = cfg.rollout.map(|spec| {
        let log = agents.rollout.snapshot();
        rollout::report(
            cfg,
            &spec,
            log,
            &admissions,
            books_versions,
            &agents.receipts,
        )
    });
    let windows = cfg.window.as_ref().map(|w| {
        let start_unix_ns = cfg.start_unix_s * 1_000_000_000;
        let duration_ns = cfg.duration_ms * 1_000_000;
        check_windows(&admissions, timeline, w, start_unix_ns, duration_ns)
    });
    let bound = match (&rollout, &windows) {
        (Some(r), _) => r.check.total(),
        (None, Some(w)) => w.bound(),
        (None, None) => check_admissions(&admissions, cfg.rate(), cfg.burst),
    };
    let admitted_max = match &windows {
        Some(w) => w.admitted_max(),
        None => cfg.burst + cfg.rate().units_in(cfg.duration_ms * 1_000_000),
    };
    Ok(NetReport {
        seed,
        settlements,
        rollout,
        bound,
        admissions,
        schedule: plan,
        applied: world.applied,
        leaders: world.leaders,
        agent_starts: agents
            .starts
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .collect(),
        offered: traffic.offered,
        admitted_max,
        windows,
        ledger_conserved,
        uncharged,
        expiry,
        accounts_checked,
        miscounts,
        grantor,
        grantor_calls: agents.receipts.calls(),
        lease_versions_received_ns: agents.receipts.received_ns(cfg.agents),
        leader_crash_in_flight: in_flight_at_crash,
        spray: traffic.spray,
        grantor_keys_peak,
        clock_rollbacks: agents.accounts.clock_rollbacks(),
    })
}

/// turmoil's TCP capacity for a run of `agents`: a listener whose backlog is full makes
/// turmoil panic, and every agent connects to the same grantor at the start. Runs small
/// enough for the default keep it, so their streams' flow control does not change.
fn tcp_capacity(agents: usize) -> usize {
    (agents * CONNECTIONS_PER_AGENT_MAX).max(TCP_CAPACITY_DEFAULT)
}

/// `cfg` with its rollout drawn from `seed`, if it asks for one: after the quiet start,
/// early enough that the transition ends a second before the faults are repaired.
fn with_drawn_rollout(seed: u64, cfg: &NetConfig) -> NetConfig {
    let mut out = cfg.clone();
    if cfg.rollout_drawn {
        let end_ms = cfg.duration_ms.saturating_sub(QUIET_MS);
        let latest_ms = end_ms.saturating_sub(rollout::transition_ms(cfg) + QUIET_MS);
        out.rollout = Some(rollout::draw(seed, cfg, QUIET_MS, latest_ms));
        out.rollout_drawn = false;
    }
    out
}

/// The books of the grantor the agents lease from: the region's, the single-node
/// allocator's, or the global cluster's.
fn grantor_books(cfg: &NetConfig, allocators: &Allocators) -> Books {
    match &allocators.single {
        _ if cfg.region => Books::Nodes(allocators.shared.region.clone()),
        Some(single) => Books::Single(Arc::clone(single)),
        None => Books::Nodes(allocators.shared.nodes.clone()),
    }
}

/// Reads the grantor's ledger on a running node (the region never crashes).
fn read_books<R, F>(books: &Books, world: &World, region: bool, f: F) -> Option<R>
where
    R: Send + 'static,
    F: FnOnce(&leasehold_common::ledger::Ledger) -> R + Send + 'static,
{
    books.read(|i| region || world.allocator_up(i), f)
}

/// Applies faults, noting agent crashes and restarts for the settlement check.
struct Noting<'a> {
    books: &'a Books,
    crashes: &'a mut CrashLedger,
    region: bool,
}

impl Noting<'_> {
    fn apply(
        self,
        world: &mut World,
        sim: &mut turmoil::Sim<'_>,
        at_ms: u64,
        action: Action,
        latency_ms_base: u64,
    ) {
        let at_ns = at_ms * 1_000_000;
        let agent = match action {
            Action::Crash { agent } | Action::Restart { agent } => Some(agent),
            _ => None,
        };
        let was_up = agent.is_some_and(|a| world.agent_up(a));
        if let (Action::Crash { agent }, true) = (action, was_up) {
            let a = agent as u32;
            let leases = read_books(self.books, world, self.region, move |l| {
                settle::holder_leases(l, a)
            });
            self.crashes.crashed(a, at_ns, leases.unwrap_or_default());
        }
        world.apply(sim, at_ms, action, latency_ms_base);
        if let (Action::Restart { agent }, false) = (action, was_up) {
            if world.agent_up(agent) {
                self.crashes.restarted(agent as u32, at_ns);
            }
        }
    }
}

/// Follows the credit of the leases crashed agents left on the books until they leave them.
fn follow_crashed_leases(books: &Books, crashes: &mut CrashLedger, world: &World, region: bool) {
    let ids = crashes.followed();
    if ids.is_empty() {
        return;
    }
    if let Some(b) = read_books(books, world, region, move |l| settle::booked(l, &ids)) {
        crashes.follow(&b);
    }
}

/// Holds the simulation still in real time at the configured instants: simulated time does
/// not move, real clocks do.
fn pause_in_real_time(cfg: &NetConfig, now_ms: u64) {
    let every = cfg.real_pause_every_ms;
    if every > 0 && now_ms > 0 && now_ms.is_multiple_of(every) {
        std::thread::sleep(Duration::from_millis(super::REAL_PAUSE_MS));
    }
}

/// Whether every ledger accounts for every unit at the end: the single-node allocator's,
/// or that of every running node of the global cluster, and the region's.
fn all_conserved(cfg: &NetConfig, allocators: &Allocators, world: &World) -> Result<bool, String> {
    let mut ok = true;
    if let Some(single) = &allocators.single {
        let replica = single.lock().unwrap_or_else(|e| e.into_inner()).clone();
        ok &= conserved(&replica.ok_or("the allocator never started")?)?;
    } else {
        let up: Vec<_> = (0..cfg.cluster)
            .filter(|i| world.allocator_up(*i))
            .filter_map(|i| allocators.shared.nodes.get(i))
            .collect();
        if up.is_empty() {
            return Err("no allocator node started".into());
        }
        ok &= cluster::all_conserved(&up);
    }
    if cfg.region {
        let region = allocators.shared.region.get(0);
        ok &= cluster::all_conserved(&[region.ok_or("the region never started")?]);
    }
    Ok(ok)
}

/// Adds the allocator hosts: one single-node global host or a global Raft cluster, and the
/// region if configured. Raft hosts keep their disks in a temporary directory for the
/// length of the run.
fn add_allocators(sim: &mut turmoil::Sim<'_>, cfg: &NetConfig) -> Result<Allocators, String> {
    let dir = tempfile::Builder::new()
        .prefix("leasehold-net-sim")
        .tempdir_in(disk_root())
        .map_err(|e| format!("creating the allocators' data directory: {e}"))?;
    // One signing key per cluster, as every node of a real cluster shares one.
    let key = || {
        LeaseSigner::generate(&ring::rand::SystemRandom::new())
            .map(Arc::new)
            .map_err(|e| format!("generating a lease signing key: {e}"))
    };
    let shared = ClusterShared {
        data_root: dir.path().to_path_buf(),
        signer: key()?,
        nodes: NodeSlots::default(),
        region_signer: key()?,
        region: NodeSlots::default(),
    };
    let mut single = None;
    if cfg.cluster == 1 {
        let replica: Arc<Mutex<Option<LocalReplica<AllocatorState>>>> = Arc::default();
        let (c, r, k) = (
            cfg.clone(),
            Arc::clone(&replica),
            Arc::clone(&shared.signer),
        );
        sim.host(allocator_host(0), move || {
            hosts::allocator(c.clone(), Arc::clone(&r), Arc::clone(&k))
        });
        single = Some(replica);
    } else {
        for i in 0..cfg.cluster {
            let (c, s) = (cfg.clone(), shared.clone());
            sim.host(allocator_host(i), move || {
                cluster::raft_allocator(i, c.clone(), s.clone())
            });
        }
    }
    if cfg.region {
        let (c, s) = (cfg.clone(), shared.clone());
        sim.host(REGION_HOST, move || region::region(c.clone(), s.clone()));
    }
    Ok(Allocators {
        single,
        shared,
        _disks: dir,
    })
}

/// Where the allocator hosts keep their disks: memory-backed when the machine has it. A
/// simulated crash drops the host's processes, not the machine's page cache, so fsync buys
/// nothing here and costs real time on every Raft write.
fn disk_root() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The faults a run of `cfg` under `seed` applies, in time order: those drawn from the
/// seed, plus the configured leader crash and its restart. Pure: no simulation runs.
pub fn plan(seed: u64, cfg: &NetConfig) -> Vec<Scheduled> {
    let mut plan = schedule(seed ^ SCHEDULE_SALT, &fault_spec(cfg));
    if !cfg.script.is_empty() {
        plan.extend(cfg.script.iter().copied());
        plan.sort_by_key(|s| s.at_ms);
    }
    if let Some(at_ms) = cfg.leader_crash_at_ms {
        plan.push(Scheduled {
            at_ms,
            action: Action::CrashLeader,
        });
        plan.push(Scheduled {
            at_ms: (at_ms + cfg.outage_ms_max).min(cfg.duration_ms.saturating_sub(QUIET_MS)),
            action: Action::RestartAllocators,
        });
        plan.sort_by_key(|s| s.at_ms);
    }
    plan
}

fn fault_spec(cfg: &NetConfig) -> FaultSpec {
    FaultSpec {
        faults: cfg.faults,
        agents: cfg.agents,
        allocators: if cfg.draw_allocator_faults {
            cfg.cluster
        } else {
            1
        },
        start_ms: QUIET_MS,
        end_ms: cfg.duration_ms.saturating_sub(QUIET_MS),
        outage_ms_max: cfg.outage_ms_max,
        latency_ms_max: cfg.latency_ms_max,
        latency_ms_base: cfg.latency_ms_base,
        clock_step_ms_max: cfg.clock_step_ms_max,
        region: cfg.region,
    }
}

/// Reads the ledger's own conservation check once the simulation has stopped.
fn conserved(replica: &LocalReplica<AllocatorState>) -> Result<bool, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| format!("inspecting the ledger: {e}"))?;
    rt.block_on(replica.read(|s| s.ledger().conserved()))
        .map_err(|e| format!("inspecting the ledger: {e}"))
}
