//! What the live demo starts and how hard it drives it.

use super::error::LiveError;
use leasehold_common::rate::Rate;

/// The policy the demo applies: one budget per tenant.
pub const POLICY_ID: &str = "api";
/// Regions, each a one-node allocator cluster leasing from the global cluster.
pub const REGIONS: [&str; 2] = ["eu", "us"];
/// Nodes of the global allocator cluster.
pub const GLOBAL_NODES: u64 = 3;

/// Longest run.
pub const DURATION_MS_MAX: u64 = 3_600_000;
pub const AGENTS_PER_REGION_MAX: usize = 8;
/// Tenants (policy keys); the Zipf weights are exact up to this many.
pub const TENANTS_MAX: usize = 16;
pub const RATE_PER_SEC_MAX: u64 = 100_000;
/// Offered load, as a percentage of a key's rate, for the lightest tenant.
pub const LOAD_PCT_MAX: u64 = 1_000;
/// Most requests offered per second over all tenants: the driver is one task.
pub const OFFERED_PER_SEC_MAX: u64 = 200_000;

/// The live demo's knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveConfig {
    /// How long traffic is offered, after the hierarchy is up.
    pub duration_ms: u64,
    /// Seed of the synthetic traffic.
    pub seed: u64,
    pub agents_per_region: usize,
    pub tenants: usize,
    /// The policy's rate per tenant key, units per second.
    pub rate_per_sec: u64,
    /// The policy's burst per tenant key, units.
    pub burst: u64,
    /// The lightest tenant offers this percentage of its rate; heavier ones more (Zipf).
    pub load_pct: u64,
    /// A tenant's hot spot moves to the next region this often.
    pub hot_spot_every_ms: u64,
    /// Share of a tenant's traffic that arrives in its hot region.
    pub hot_share_pct: u64,
    /// The policy's lease time to live.
    pub lease_ttl_ms: u64,
    /// The policy's refresh horizon: holders ask for credit to last this long.
    pub refresh_horizon_ms: u64,
    /// How often the driver offers the requests that have come due.
    pub tick_ms: u64,
    /// How often progress is reported.
    pub progress_every_ms: u64,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            duration_ms: 20_000,
            seed: 1,
            agents_per_region: 3,
            tenants: 3,
            rate_per_sec: 1_000,
            burst: 500,
            load_pct: 150,
            hot_spot_every_ms: 5_000,
            hot_share_pct: 80,
            lease_ttl_ms: 2_000,
            refresh_horizon_ms: 250,
            tick_ms: 5,
            progress_every_ms: 1_000,
        }
    }
}

impl LiveConfig {
    pub fn validate(&self) -> Result<(), LiveError> {
        let bad =
            |field, value: &dyn std::fmt::Display, reason| LiveError::config(field, value, reason);
        if self.duration_ms == 0 || self.duration_ms > DURATION_MS_MAX {
            return Err(bad("duration_ms", &self.duration_ms, "must be 1..=3600000"));
        }
        if !(1..=AGENTS_PER_REGION_MAX).contains(&self.agents_per_region) {
            return Err(bad(
                "agents_per_region",
                &self.agents_per_region,
                "must be 1..=8",
            ));
        }
        if !(1..=TENANTS_MAX).contains(&self.tenants) {
            return Err(bad("tenants", &self.tenants, "must be 1..=16"));
        }
        if self.rate_per_sec == 0 || self.rate_per_sec > RATE_PER_SEC_MAX {
            return Err(bad(
                "rate_per_sec",
                &self.rate_per_sec,
                "must be 1..=100000",
            ));
        }
        if self.burst == 0 || self.burst > RATE_PER_SEC_MAX {
            return Err(bad("burst", &self.burst, "must be 1..=100000"));
        }
        if self.load_pct == 0 || self.load_pct > LOAD_PCT_MAX {
            return Err(bad("load_pct", &self.load_pct, "must be 1..=1000"));
        }
        if self.hot_share_pct > 100 {
            return Err(bad("hot_share_pct", &self.hot_share_pct, "is a percentage"));
        }
        if self.refresh_horizon_ms == 0 || self.lease_ttl_ms <= self.refresh_horizon_ms {
            return Err(bad(
                "lease_ttl_ms",
                &self.lease_ttl_ms,
                "must exceed refresh_horizon_ms, which must be positive",
            ));
        }
        if self.hot_spot_every_ms == 0 || self.tick_ms == 0 || self.progress_every_ms == 0 {
            return Err(bad(
                "hot_spot_every_ms/tick_ms/progress_every_ms",
                &format!(
                    "{}/{}/{}",
                    self.hot_spot_every_ms, self.tick_ms, self.progress_every_ms
                ),
                "must be positive",
            ));
        }
        let offered = super::traffic::Demand::new(self, REGIONS.len()).offered_per_sec();
        if offered > OFFERED_PER_SEC_MAX {
            return Err(bad(
                "load_pct",
                &self.load_pct,
                "with this rate and tenant count offers more than 200000 requests/s",
            ));
        }
        Ok(())
    }

    /// The policy's rate per key.
    pub fn rate(&self) -> Result<Rate, LiveError> {
        Rate::per_second(self.rate_per_sec)
            .map_err(|_| LiveError::config("rate_per_sec", self.rate_per_sec, "must be positive"))
    }

    /// The policy YAML applied through the global cluster's admin API.
    pub fn policy_yaml(&self) -> String {
        format!(
            "id: {POLICY_ID}\ndimensions: [{{name: tenant}}]\nkey: [tenant]\n\
             rate: {{units: {}, per: 1s}}\nburst: {}\nscope: global\n\
             lease: {{ttl: {}ms, refresh_horizon: {}ms, reserve_fraction: 0}}\n",
            self.rate_per_sec, self.burst, self.lease_ttl_ms, self.refresh_horizon_ms
        )
    }

    /// Name of tenant `i` (its policy key).
    pub fn tenant_name(i: usize) -> String {
        format!("tenant-{i}")
    }

    /// Holder id (and certificate name) of agent `i` of `region`.
    pub fn agent_name(region: &str, i: usize) -> String {
        format!("{region}-agent-{}", i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_valid_and_the_policy_parses() {
        let cfg = LiveConfig::default();
        cfg.validate().unwrap();
        let p = leasehold_common::policy::Policy::from_yaml(&cfg.policy_yaml()).unwrap();
        assert_eq!(p.id, POLICY_ID);
    }

    #[test]
    fn errors_name_the_field() {
        let cfg = LiveConfig {
            tenants: 17,
            ..LiveConfig::default()
        };
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("tenants") && e.contains("17"), "{e}");
        let cfg = LiveConfig {
            load_pct: 1_000,
            rate_per_sec: 100_000,
            ..LiveConfig::default()
        };
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("load_pct"), "{e}");
    }
}
