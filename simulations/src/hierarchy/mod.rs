//! A root ledger, delegated region ledgers and agents, stepped on a simulated clock.

mod agent;
mod config;
mod region;
mod traffic;

pub use config::HierarchyConfig;

use crate::bound::{check_windows, BoundCheck};
use agent::Agent;
use leasehold_common::ledger::{Command, Ledger, LedgerConfig, PolicyParams};
use leasehold_common::time::Nanos;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use region::Region;
use serde::Serialize;
use traffic::Traffic;

/// The one policy every level enforces.
pub const POLICY_ID: &str = "api";
/// The one key its traffic falls on (a single tenant spread over every agent).
pub const KEY: &str = "api:tenant=acme";

/// What one step did, summed over the agents.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepTotals {
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
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

pub struct Hierarchy {
    cfg: HierarchyConfig,
    params: PolicyParams,
    root: Ledger,
    regions: Vec<Region>,
    agents: Vec<Agent>,
    traffic: Traffic,
    rng: ChaCha8Rng,
    now_ns: u64,
    series: Vec<u64>,
    totals: StepTotals,
}

impl Hierarchy {
    pub fn new(cfg: HierarchyConfig) -> Result<Self, String> {
        cfg.validate()?;
        let params = cfg.policy_params();
        let mut root = Ledger::new(LedgerConfig::root("global"));
        root.apply(Nanos(0), Command::PutPolicy(params.clone()))
            .map_err(|e| e.to_string())?;
        let sub_params = PolicyParams {
            lease: cfg.agent_lease_params(),
            ..params.clone()
        };
        let regions = (0..cfg.regions)
            .map(|r| Region::new(r, &sub_params))
            .collect::<Result<Vec<_>, _>>()?;
        let agents = (0..cfg.regions * cfg.agents_per_region)
            .map(|i| Agent::new(i, i / cfg.agents_per_region))
            .collect();
        let traffic = Traffic::new(&cfg);
        Ok(Hierarchy {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            params,
            root,
            regions,
            agents,
            traffic,
            now_ns: 0,
            series: Vec::new(),
            totals: StepTotals::default(),
        })
    }

    pub fn config(&self) -> &HierarchyConfig {
        &self.cfg
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Advances one step: traffic, agent leases, region leases, expiry.
    pub fn step(&mut self) -> StepTotals {
        let now = Nanos(self.now_ns);
        let step_ns = self.cfg.step_ms * 1_000_000;
        self.traffic.advance(self.now_ns, &mut self.rng);
        let mut step = StepTotals::default();
        for agent in &mut self.agents {
            if self.cfg.crash_at_ns() == Some(self.now_ns) && agent.id() == 0 {
                agent.crash();
            }
            let region = &mut self.regions[agent.region()];
            let offered = self.traffic.offered(agent.id(), step_ns, &mut self.rng);
            let t = agent.step(region.ledger_mut(), now, offered, &self.cfg);
            step.offered += t.offered;
            step.admitted += t.admitted;
            step.rejected += t.rejected;
        }
        for region in &mut self.regions {
            let demand = self
                .agents
                .iter()
                .filter(|a| a.region() == region.id())
                .map(|a| a.demand_per_sec())
                .sum();
            region.step(&mut self.root, now, demand, &self.cfg);
        }
        self.root
            .apply(now, Command::Tick)
            .expect("tick never fails");
        self.now_ns += step_ns;
        self.series.push(step.admitted);
        self.totals.offered += step.offered;
        self.totals.admitted += step.admitted;
        self.totals.rejected += step.rejected;
        step
    }

    pub fn levels(&self) -> LevelView {
        let root = self.root.account(KEY);
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

    /// Units the policy allows over the run so far: `B + r·T`.
    pub fn bound(&self) -> u64 {
        self.params.burst + self.params.rate.units_in(self.now_ns)
    }

    /// Every window of the admissions so far against `B + r·T`.
    pub fn check(&self) -> BoundCheck {
        let step_ns = self.cfg.step_ms * 1_000_000;
        check_windows(&self.series, step_ns, self.params.rate, self.params.burst)
    }

    /// True when every ledger accounts for each unit exactly once.
    pub fn conserved(&self) -> bool {
        self.root.conserved() && self.regions.iter().all(|r| r.ledger().conserved())
    }
}
