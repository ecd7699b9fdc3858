//! A root ledger, delegated region ledgers and agents, stepped on a simulated clock, with
//! faults injected at chosen times and the promises checked as it runs.

mod agent;
mod clock;
mod config;
mod faults;
mod promises;
mod region;
mod root;
mod traffic;
mod witness;

pub use agent::CrashKind;
pub use clock::SimClock;
pub use config::{Defect, HierarchyConfig, AGENTS_MAX, DURATION_S_MAX};
pub use faults::{Fault, FAULTS_MAX};
pub use root::{LeaderLoss, LinkError};

use crate::bound::{check_windows, BoundCheck};
use crate::error::SimError;
use crate::promises::PromiseLog;
use agent::{Agent, Link};
use leasehold_common::ledger::{Command, Ledger, LedgerConfig, PolicyParams};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use region::Region;
use root::RootLink;
use serde::Serialize;
use traffic::Traffic;
use witness::Witness;

/// The one policy every level enforces.
pub const POLICY_ID: &str = "api";
/// The one key its traffic falls on (a single tenant spread over every agent).
pub const KEY: &str = "api:tenant=acme";

/// What one step did, summed over the agents.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepTotals {
    pub offered: u64,
    /// Admitted against leased credit (what P1 bounds).
    pub admitted: u64,
    pub rejected: u64,
    /// Admitted uncharged by `fail_open` while the region was unreachable, counted apart.
    pub fail_open: u64,
    /// Admitted at the local emergency rate by `restricted`, counted apart.
    pub restricted: u64,
}

/// Figures per level at one moment.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LevelView {
    /// Root: credit granted to regions so far; outstanding with them now; stranded.
    pub root_granted: u64,
    pub root_outstanding: u64,
    pub root_stranded: u64,
    /// Regions: credit granted to agents so far; idle upstream credit now.
    pub regions_granted: u64,
    pub regions_idle: u64,
    pub regions_stranded: u64,
    /// Agents: cumulative traffic.
    pub agents: StepTotals,
}

/// One step of a run, as written to the time series.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepRecord {
    pub t_ms: u64,
    pub totals: StepTotals,
    /// Credit out on lease from the root now.
    pub root_outstanding: u64,
    /// Credit written off so far, all ledgers.
    pub stranded: u64,
    /// Requests received this step by the root and by the regions.
    pub root_requests: u64,
    pub region_requests: u64,
    pub active_agents: u64,
    /// State held now, all ledgers.
    pub keys: u64,
    pub leases: u64,
}

/// A policy version and the step it took effect at.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyEpoch {
    pub from_step: usize,
    pub rate: Rate,
    pub burst: u64,
}

/// A simulated hierarchy: built from a configuration, stepped, faulted and checked.
pub struct Hierarchy {
    cfg: HierarchyConfig,
    params: PolicyParams,
    root: RootLink,
    regions: Vec<Region>,
    agents: Vec<Agent>,
    traffic: Traffic,
    rng: ChaCha8Rng,
    now_ns: u64,
    series: Vec<u64>,
    totals: StepTotals,
    records: Vec<StepRecord>,
    witness: Witness,
    epochs: Vec<PolicyEpoch>,
    faults: Vec<(u64, Fault)>,
    region_requests: u64,
    /// Charged admissions per step, per region.
    region_series: Vec<Vec<u64>>,
}

impl Hierarchy {
    /// Builds the hierarchy; the configuration is validated first.
    pub fn new(cfg: HierarchyConfig) -> Result<Self, SimError> {
        cfg.validate()?;
        let params = cfg.policy_params();
        let mut root_cfg = LedgerConfig::root("global");
        root_cfg.limits = cfg.limits();
        let grace_ns = root_cfg.expiry_grace_ms * 1_000_000;
        let mut root = Ledger::new(root_cfg);
        root.apply(Nanos(0), Command::PutPolicy(params.clone()))?;
        let sub_params = PolicyParams {
            lease: cfg.agent_lease_params(),
            ..params.clone()
        };
        let regions = (0..cfg.regions)
            .map(|r| Region::new(r, &sub_params, &cfg))
            .collect::<Result<Vec<_>, _>>()?;
        let agents = (0..cfg.agents())
            .map(|i| Agent::new(i, i / cfg.agents_per_region, cfg.defect, cfg.clock()))
            .collect();
        let traffic = Traffic::new(&cfg);
        let epochs = vec![PolicyEpoch {
            from_step: 0,
            rate: params.rate,
            burst: params.burst,
        }];
        let mut sim = Hierarchy {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            params,
            root: RootLink::new(root),
            regions,
            agents,
            traffic,
            now_ns: 0,
            series: Vec::new(),
            totals: StepTotals::default(),
            records: Vec::new(),
            witness: Witness::new(grace_ns),
            epochs,
            faults: Vec::new(),
            region_requests: 0,
            region_series: vec![Vec::new(); cfg.regions],
            cfg,
        };
        if let Some(ns) = sim.cfg.crash_at_ns() {
            let crash = Fault::Crash {
                agent: 0,
                kind: CrashKind::UnusedCredit,
            };
            sim.schedule(ns / 1_000_000, crash)?;
        }
        Ok(sim)
    }

    /// The configuration the run was built from.
    pub fn config(&self) -> &HierarchyConfig {
        &self.cfg
    }

    /// Simulated true time of the next step.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// True once the configured duration has been simulated.
    pub fn done(&self) -> bool {
        self.series.len() as u64 >= self.cfg.steps()
    }

    /// Runs the remaining steps of the configured duration.
    pub fn run(&mut self) {
        while !self.done() {
            self.step();
        }
    }

    /// Advances one step: faults, traffic, agent leases, region leases, expiry, checks.
    pub fn step(&mut self) -> StepTotals {
        let true_ns = self.now_ns;
        let step_ns = self.cfg.step_ns();
        let root_before = self.root.commands();
        let regions_before = self.region_requests;
        let mut step = StepTotals {
            admitted: self.apply_due_faults(),
            ..StepTotals::default()
        };
        self.traffic.advance(true_ns, &mut self.rng);
        for s in &mut self.region_series {
            s.push(0);
        }
        for agent in &mut self.agents {
            let region = &mut self.regions[agent.region()];
            let offered = self.traffic.offered(agent.id(), step_ns, &mut self.rng);
            let region_now = region.now(true_ns);
            let link = Link {
                ledger: region.ledger_mut(),
                root: self.root.ledger(),
                region_now,
                true_ns,
                witness: &mut self.witness,
            };
            let (t, sent) = agent.step(link, offered, &self.cfg);
            self.region_requests += sent;
            if let Some(n) = self.region_series[agent.region()].last_mut() {
                *n += t.admitted;
            }
            add(&mut step, &t);
        }
        for region in &mut self.regions {
            let demand = self
                .agents
                .iter()
                .filter(|a| a.region() == region.id())
                .map(|a| a.demand_per_sec())
                .sum();
            let now = region.now(true_ns);
            region.step(&mut self.root, now, Nanos(true_ns), demand, &self.cfg);
        }
        self.root
            .ledger_mut()
            .apply(Nanos(true_ns), Command::Tick)
            .expect("tick never fails");
        self.check_step(true_ns);
        self.series.push(step.admitted);
        add(&mut self.totals, &step);
        let record = self.record(true_ns, step, root_before, regions_before);
        self.records.push(record);
        self.now_ns += step_ns;
        step
    }

    fn record(&self, t_ns: u64, totals: StepTotals, root0: u64, regions0: u64) -> StepRecord {
        let v = self.levels();
        let ledgers = self.ledgers();
        StepRecord {
            t_ms: t_ns / 1_000_000,
            totals,
            root_outstanding: v.root_outstanding,
            stranded: v.root_stranded + v.regions_stranded,
            root_requests: self.root.commands() - root0,
            region_requests: self.region_requests - regions0,
            active_agents: self.traffic.active() as u64,
            keys: ledgers.iter().map(|l| l.accounts().count() as u64).sum(),
            leases: ledgers.iter().map(|l| l.leases().count() as u64).sum(),
        }
    }

    fn ledgers(&self) -> Vec<&Ledger> {
        std::iter::once(self.root.ledger())
            .chain(self.regions.iter().map(Region::ledger))
            .collect()
    }

    /// Credit figures per level now, and the agents' cumulative traffic.
    pub fn levels(&self) -> LevelView {
        let root = self.root.ledger().account(KEY);
        let mut v = LevelView {
            root_granted: root.map_or(0, |a| a.stats.granted),
            root_outstanding: root.map_or(0, |a| a.outstanding),
            root_stranded: root.map_or(0, |a| a.stats.stranded),
            agents: self.totals,
            ..LevelView::default()
        };
        for r in &self.regions {
            if let Some(a) = r.ledger().account(KEY) {
                v.regions_granted += a.stats.granted;
                v.regions_idle += a.free_now();
                v.regions_stranded += a.stats.stranded;
            }
        }
        v
    }

    /// Units the first policy version allows over the run so far: `B + r·T`.
    pub fn bound(&self) -> u64 {
        self.epochs[0].burst + self.epochs[0].rate.units_in(self.now_ns)
    }

    /// Every window of the admissions so far against the first version's `B + r·T`.
    pub fn check(&self) -> BoundCheck {
        let e = self.epochs[0];
        check_windows(&self.series, self.cfg.step_ns(), e.rate, e.burst)
    }

    /// True when every ledger accounts for each unit exactly once.
    pub fn conserved(&self) -> bool {
        self.ledgers().iter().all(|l| l.conserved())
    }

    /// Admitted units per step (leased credit only).
    pub fn series(&self) -> &[u64] {
        &self.series
    }

    /// Charged admissions per step by the agents of `region` (crash bursts not included).
    pub fn region_series(&self, region: usize) -> &[u64] {
        &self.region_series[region]
    }

    /// One record per step so far.
    pub fn records(&self) -> &[StepRecord] {
        &self.records
    }

    /// Every policy version in force during the run, oldest first.
    pub fn epochs(&self) -> &[PolicyEpoch] {
        &self.epochs
    }

    /// Steps back detected by agents' and regions' clocks.
    pub fn clock_steps_back(&self) -> u64 {
        let a: u64 = self.agents.iter().map(|a| a.clock().steps_back()).sum();
        a + self
            .regions
            .iter()
            .map(|r| r.clock().steps_back())
            .sum::<u64>()
    }

    /// Root leader losses so far.
    pub fn leader_losses(&self) -> u64 {
        self.root.losses()
    }

    /// Region requests that got no answer (partition or leader loss) and were resent.
    pub fn unanswered_region_requests(&self) -> u64 {
        self.regions.iter().map(Region::unanswered).sum()
    }

    /// The root's ledger as it stands.
    pub fn root_ledger(&self) -> &Ledger {
        self.root.ledger()
    }

    /// The promises checked step by step so far, plus P1 over every window.
    pub fn promises(&self) -> PromiseLog {
        let mut log = self.witness.log.clone();
        log.merge(&self.budget_log());
        log
    }
}

fn add(sum: &mut StepTotals, t: &StepTotals) {
    sum.offered += t.offered;
    sum.admitted += t.admitted;
    sum.rejected += t.rejected;
    sum.fail_open += t.fail_open;
    sum.restricted += t.restricted;
}
