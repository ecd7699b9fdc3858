//! The shape of a simulated hierarchy and its traffic.

use leasehold_common::ledger::{LeaseParams, PolicyParams};
use leasehold_common::rate::Rate;
use serde::Serialize;

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
        }
    }
}

impl HierarchyConfig {
    pub fn validate(&self) -> Result<(), String> {
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
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be positive"));
        }
        if self.regions * self.agents_per_region > 10_000 {
            return Err("at most 10000 agents".into());
        }
        if self.agent_ttl_ms > self.root_ttl_ms {
            return Err("agent_ttl_ms must not exceed root_ttl_ms".into());
        }
        Ok(())
    }

    pub fn crash_at_ns(&self) -> Option<u64> {
        self.crash_agent_at_s.map(|s| s * 1_000_000_000)
    }

    /// Renewals are sized for two report intervals of demand.
    pub fn horizon_ms(&self) -> u64 {
        2 * self.report_every_ms
    }

    pub fn policy_params(&self) -> PolicyParams {
        PolicyParams {
            policy_id: super::POLICY_ID.into(),
            version: 1,
            rate: Rate::per_second(self.rate_per_sec).expect("validated positive"),
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
        }
    }

    pub fn agent_lease_params(&self) -> LeaseParams {
        LeaseParams {
            ttl_ms: self.agent_ttl_ms,
            ..self.policy_params().lease
        }
    }
}
