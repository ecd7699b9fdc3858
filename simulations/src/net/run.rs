//! Builds the simulated world from a seed, steps it while applying the fault schedule,
//! and checks the admission log.

use super::check::{check_admissions, Admission, TrafficLog};
use super::faults::{schedule, Action, FaultSpec, Scheduled};
use super::hosts::{self, agent_host, ALLOCATOR_HOST};
use super::{NetConfig, NetError};
use crate::bound::BoundCheck;
use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::state::AllocatorState;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Separates the fault schedule's rng stream from turmoil's, which gets the seed itself.
const SCHEDULE_SALT: u64 = 0x6e65_745f_6661_756c;
/// The calendar instant the simulation starts at (2026-01-01T00:00:00Z), in seconds since
/// the UNIX epoch; fixed so that no run depends on when it was started.
const EPOCH_S: u64 = 1_767_225_600;
/// turmoil's step, in milliseconds of simulated time.
const TICK_MS: u64 = 1;
/// Faults start this long after the start and are all repaired this long before the end.
const QUIET_MS: u64 = 1_000;

/// What a networked run did.
#[derive(Clone, Debug)]
pub struct NetReport {
    pub seed: u64,
    /// Every admission, ordered by time then agent.
    pub admissions: Vec<Admission>,
    /// P1 over every window of the run.
    pub bound: BoundCheck,
    pub schedule: Vec<Scheduled>,
    /// Requests offered in total (admitted or not).
    pub offered: u64,
    /// `B + r·T` for the whole run: the most the run may admit.
    pub admitted_max: u64,
    /// Whether the allocator's ledger accounts for every unit at the end.
    pub ledger_conserved: bool,
}

impl NetReport {
    /// P1 held and the ledger balanced.
    pub fn passed(&self) -> bool {
        self.bound.violations == 0 && self.ledger_conserved
    }

    /// Admissions per agent.
    pub fn admitted_by_agent(&self, agents: usize) -> Vec<u64> {
        let mut out = vec![0; agents];
        for a in &self.admissions {
            if let Some(n) = out.get_mut(a.agent as usize) {
                *n += 1;
            }
        }
        out
    }

    /// FNV-1a over the admission log: equal logs give equal digests, for comparing runs.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for a in &self.admissions {
            for b in a
                .at_ns
                .to_le_bytes()
                .into_iter()
                .chain(a.agent.to_le_bytes())
            {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    }
}

/// Runs `cfg` under `seed` to the end of its duration.
pub fn run(seed: u64, cfg: &NetConfig) -> Result<NetReport, NetError> {
    cfg.validate()?;
    let failed = |at_ms: u64, reason: String| NetError::Failed {
        seed,
        at_ms,
        reason,
    };
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(std::time::UNIX_EPOCH + Duration::from_secs(EPOCH_S))
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_millis(cfg.duration_ms + QUIET_MS))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(cfg.latency_ms_base))
        .build();
    let log = Arc::new(Mutex::new(TrafficLog::default()));
    let replica: Arc<Mutex<Option<LocalReplica<AllocatorState>>>> = Arc::default();
    {
        let (cfg, replica) = (cfg.clone(), Arc::clone(&replica));
        sim.host(ALLOCATOR_HOST, move || {
            hosts::allocator(cfg.clone(), Arc::clone(&replica))
        });
    }
    for i in 0..cfg.agents {
        let (cfg, log) = (cfg.clone(), Arc::clone(&log));
        sim.host(agent_host(i), move || {
            hosts::agent(i, cfg.clone(), Arc::clone(&log))
        });
    }
    let plan = schedule(seed ^ SCHEDULE_SALT, &fault_spec(cfg));
    let mut faults = Faults::new(cfg.agents);
    let mut next = 0;
    loop {
        let now_ms = sim.elapsed().as_millis() as u64;
        if now_ms >= cfg.duration_ms {
            break;
        }
        while let Some(s) = plan.get(next).filter(|s| s.at_ms <= now_ms) {
            faults.apply(&mut sim, s.action, cfg.latency_ms_base);
            next += 1;
        }
        sim.step().map_err(|e| failed(now_ms, e.to_string()))?;
    }
    let traffic = std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
    let mut admissions = traffic.admissions;
    admissions.sort_unstable();
    let replica = replica.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let ledger_conserved = match replica {
        Some(r) => conserved(&r).map_err(|e| failed(cfg.duration_ms, e))?,
        None => {
            return Err(failed(
                cfg.duration_ms,
                "the allocator never started".into(),
            ))
        }
    };
    Ok(NetReport {
        seed,
        bound: check_admissions(&admissions, cfg.rate(), cfg.burst),
        admissions,
        schedule: plan,
        offered: traffic.offered,
        admitted_max: cfg.burst + cfg.rate().units_in(cfg.duration_ms * 1_000_000),
        ledger_conserved,
    })
}

fn fault_spec(cfg: &NetConfig) -> FaultSpec {
    FaultSpec {
        faults: cfg.faults,
        agents: cfg.agents,
        start_ms: QUIET_MS,
        end_ms: cfg.duration_ms.saturating_sub(QUIET_MS),
        outage_ms_max: cfg.outage_ms_max,
        latency_ms_max: cfg.latency_ms_max,
        latency_ms_base: cfg.latency_ms_base,
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

/// Overlapping faults on one agent nest: it is cut off (or down) while any of them lasts.
struct Faults {
    partitions: Vec<u32>,
    crashes: Vec<u32>,
}

impl Faults {
    fn new(agents: usize) -> Self {
        Faults {
            partitions: vec![0; agents],
            crashes: vec![0; agents],
        }
    }

    fn apply(&mut self, sim: &mut turmoil::Sim<'_>, action: Action, latency_ms_base: u64) {
        match action {
            Action::Partition { agent } => {
                self.partitions[agent] += 1;
                if self.partitions[agent] == 1 {
                    sim.partition(ALLOCATOR_HOST, agent_host(agent));
                }
            }
            Action::Repair { agent } => {
                self.partitions[agent] -= 1;
                if self.partitions[agent] == 0 {
                    sim.repair(ALLOCATOR_HOST, agent_host(agent));
                }
            }
            Action::MaxLatency { latency_ms } => {
                sim.set_max_message_latency(Duration::from_millis(latency_ms.max(latency_ms_base)));
            }
            Action::Crash { agent } => {
                self.crashes[agent] += 1;
                if self.crashes[agent] == 1 {
                    sim.crash(agent_host(agent));
                }
            }
            Action::Restart { agent } => {
                self.crashes[agent] -= 1;
                if self.crashes[agent] == 0 {
                    sim.bounce(agent_host(agent));
                }
            }
        }
    }
}
