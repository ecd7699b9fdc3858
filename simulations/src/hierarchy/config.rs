//! The shape of a simulated hierarchy and its traffic.

use crate::error::SimError;
use leasehold_common::ledger::{LeaseParams, LedgerLimits, PolicyParams};
use leasehold_common::policy::FailureMode;
use leasehold_common::rate::Rate;
use serde::Serialize;

/// Most agents one simulation runs.
pub const AGENTS_MAX: usize = 10_000;
/// Longest simulated run: P1 checks every window, which grows with the square of the steps.
pub const DURATION_S_MAX: u64 = 600;

/// A deliberately broken enforcer, to show that the checks catch it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Defect {
    /// The agent charges only half of what it admits to its lease, so it spends the same
    /// credit more than once.
    Overspend { agent: usize },
    /// The agent keeps spending its lease after the deadline.
    IgnoreExpiry { agent: usize },
}

impl Defect {
    /// The broken agent.
    pub fn agent(self) -> usize {
        match self {
            Defect::Overspend { agent } | Defect::IgnoreExpiry { agent } => agent,
        }
    }
}

/// The shape of a simulated hierarchy, its policy, its traffic and its failure behaviour.
#[derive(Clone, Debug, Serialize)]
pub struct HierarchyConfig {
    pub seed: u64,
    pub regions: usize,
    pub agents_per_region: usize,
    /// The policy: sustained units per second and burst.
    pub rate_per_sec: u64,
    pub burst: u64,
    /// Simulated duration and step.
    pub duration_s: u64,
    pub step_ms: u64,
    /// Lease lifetimes at the root (regions' leases) and in regions (agents' leases).
    pub root_ttl_ms: u64,
    pub agent_ttl_ms: u64,
    /// How often holders report usage and renew.
    pub report_every_ms: u64,
    /// Offered load as a multiple of the sustained rate (above 1 means contention).
    pub load_factor_pct: u64,
    /// Zipf exponent of demand over agents, in hundredths (100 = 1.0).
    pub zipf_exponent_pct: u64,
    /// The busiest agents change this often.
    pub hot_spot_every_s: u64,
    /// Crash agent 0 (losing its unreported spend) at this second, if set.
    pub crash_agent_at_s: Option<u64>,
    /// What an agent does while its region cannot be reached.
    pub failure: FailureMode,
    /// `restricted`: the local emergency rate, per agent.
    pub emergency_rate_per_sec: u64,
    /// `restricted`: share of traffic at or above the minimum priority, in percent.
    pub critical_pct: u64,
    /// Agents taking traffic at the start (the rest join when scaled up); 0 means all.
    pub active_agents: usize,
    /// Caps on every ledger's state (P4).
    pub keys_max: usize,
    pub leases_max: usize,
    /// A broken enforcer, for checking the checks.
    pub defect: Option<Defect>,
    /// Agents and regions read their clocks through the guard alone, which stalls through
    /// a step back instead of correcting for it (for comparison).
    pub clock_guard_only: bool,
}

impl Default for HierarchyConfig {
    fn default() -> Self {
        HierarchyConfig {
            seed: 1,
            regions: 2,
            agents_per_region: 4,
            rate_per_sec: 1_000,
            burst: 2_000,
            duration_s: 60,
            step_ms: 10,
            root_ttl_ms: 5_000,
            agent_ttl_ms: 2_000,
            report_every_ms: 250,
            load_factor_pct: 150,
            zipf_exponent_pct: 110,
            hot_spot_every_s: 15,
            crash_agent_at_s: Some(20),
            failure: FailureMode::CachedLease,
            emergency_rate_per_sec: 20,
            critical_pct: 20,
            active_agents: 0,
            keys_max: 1_000,
            leases_max: 10_000,
            defect: None,
            clock_guard_only: false,
        }
    }
}

impl HierarchyConfig {
    /// Refuses a configuration that cannot be simulated, naming the field and the reason.
    pub fn validate(&self) -> Result<(), SimError> {
        let positive = [
            ("regions", self.regions as u64),
            ("agents_per_region", self.agents_per_region as u64),
            ("rate_per_sec", self.rate_per_sec),
            ("burst", self.burst),
            ("duration_s", self.duration_s),
            ("step_ms", self.step_ms),
            ("root_ttl_ms", self.root_ttl_ms),
            ("agent_ttl_ms", self.agent_ttl_ms),
            ("report_every_ms", self.report_every_ms),
            ("hot_spot_every_s", self.hot_spot_every_s),
            ("emergency_rate_per_sec", self.emergency_rate_per_sec),
            ("keys_max", self.keys_max as u64),
            ("leases_max", self.leases_max as u64),
        ];
        if let Some((name, v)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(SimError::config(name, v, "must be positive"));
        }
        if self.duration_s > DURATION_S_MAX {
            return Err(SimError::config(
                "duration_s",
                self.duration_s,
                "exceeds 600 simulated seconds",
            ));
        }
        if self.agents() > AGENTS_MAX {
            return Err(SimError::config(
                "agents_per_region",
                self.agents_per_region,
                "regions × agents_per_region exceeds 10000 agents",
            ));
        }
        if self.agent_ttl_ms > self.root_ttl_ms {
            return Err(SimError::config(
                "agent_ttl_ms",
                self.agent_ttl_ms,
                "must not exceed root_ttl_ms",
            ));
        }
        if self.step_ms > 1_000 || 1_000 % self.step_ms != 0 {
            return Err(SimError::config(
                "step_ms",
                self.step_ms,
                "must divide one second",
            ));
        }
        if self.critical_pct > 100 {
            return Err(SimError::config(
                "critical_pct",
                self.critical_pct,
                "is a percentage",
            ));
        }
        if self.active_agents > self.agents() {
            return Err(SimError::config(
                "active_agents",
                self.active_agents,
                "exceeds the agents configured",
            ));
        }
        Ok(())
    }

    /// Every agent, active or not.
    pub fn agents(&self) -> usize {
        self.regions * self.agents_per_region
    }

    /// Agents taking traffic at the start.
    pub fn initially_active(&self) -> usize {
        if self.active_agents == 0 {
            self.agents()
        } else {
            self.active_agents
        }
    }

    /// One step, in nanoseconds.
    pub fn step_ns(&self) -> u64 {
        self.step_ms * 1_000_000
    }

    /// Steps in the whole run.
    pub fn steps(&self) -> u64 {
        self.duration_s * 1_000 / self.step_ms
    }

    pub fn crash_at_ns(&self) -> Option<u64> {
        self.crash_agent_at_s.map(|s| s * 1_000_000_000)
    }

    /// Renewals are sized for two report intervals of demand.
    pub fn horizon_ms(&self) -> u64 {
        2 * self.report_every_ms
    }

    /// The policy's sustained rate.
    pub fn rate(&self) -> Rate {
        Rate::per_second(self.rate_per_sec).expect("validated positive")
    }

    /// Every ledger's caps.
    pub fn limits(&self) -> LedgerLimits {
        LedgerLimits {
            keys_max: self.keys_max,
            leases_max: self.leases_max,
            ..LedgerLimits::default()
        }
    }

    /// The policy as the root ledger runs it (version 1).
    pub fn policy_params(&self) -> PolicyParams {
        PolicyParams {
            policy_id: super::POLICY_ID.into(),
            version: 1,
            rate: self.rate(),
            burst: self.burst,
            lease: LeaseParams {
                ttl_ms: self.root_ttl_ms,
                min_credit: 1,
                max_credit: self.burst,
                reserve_ppm: 20_000,
                reserve_priority_min: 8,
                refresh_horizon_ms: self.horizon_ms(),
            },
            weights: Default::default(),
            window: None,
            owner: Default::default(),
            exact: false,
        }
    }

    /// A new participant's clock.
    pub fn clock(&self) -> super::SimClock {
        if self.clock_guard_only {
            super::SimClock::guard_only()
        } else {
            super::SimClock::default()
        }
    }

    /// Lease parameters of the regions' sub-leases to agents.
    pub fn agent_lease_params(&self) -> LeaseParams {
        LeaseParams {
            ttl_ms: self.agent_ttl_ms,
            ..self.policy_params().lease
        }
    }
}
