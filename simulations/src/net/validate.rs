//! Checking a networked run's configuration before anything starts: every value out of
//! range is refused by name.

use super::faults::{self, Action};
use super::{clock, cluster, rollout, run, NetConfig, NetError};
use super::{
    AGENTS_MAX, DURATION_MS_MAX, HOLDER_REFRESH_HORIZON_MS_MAX, OFFER_PER_ROUND_MAX,
    REAL_PAUSE_EVERY_MS_MIN, REPORT_EVERY_MS_MAX, START_UNIX_S_MAX,
};
use leasehold_common::rate::Rate;

impl NetConfig {
    /// Rejects values the run cannot honour.
    pub fn validate(&self) -> Result<(), NetError> {
        if !(1..=AGENTS_MAX).contains(&self.agents) {
            return invalid("agents", self.agents as u64, "must be from 1 to 160");
        }
        if !(1..self.lease_ttl_ms).contains(&self.refresh_horizon_ms) {
            return invalid(
                "refresh_horizon_ms",
                self.refresh_horizon_ms,
                "must be at least 1 and shorter than the lease TTL",
            );
        }
        if let Some(h) = self.holder_refresh_horizon_ms {
            if !(1..=HOLDER_REFRESH_HORIZON_MS_MAX).contains(&h) {
                return invalid("holder_refresh_horizon_ms", h, "must be from 1 to 3600000");
            }
        }
        if !(1..=REPORT_EVERY_MS_MAX).contains(&self.report_every_ms) {
            return invalid(
                "report_every_ms",
                self.report_every_ms,
                "must be from 1 to 60000",
            );
        }
        if let Err((field, value, reason)) = self.demand.validate(self.agents) {
            return invalid(field, value, reason);
        }
        self.validate_script()?;
        self.validate_spray()?;
        self.validate_window()?;
        if !(1_000..=DURATION_MS_MAX).contains(&self.duration_ms) {
            return invalid(
                "duration_ms",
                self.duration_ms,
                "must be from 1000 to 600000",
            );
        }
        if Rate::per_second(self.rate_per_s).is_err() || self.rate_per_s == 0 {
            return invalid("rate_per_s", self.rate_per_s, "must be a positive rate");
        }
        if self.lease_ttl_ms == 0 {
            return invalid("lease_ttl_ms", 0, "must be greater than zero");
        }
        if self.offer_every_ms == 0 {
            return invalid("offer_every_ms", 0, "must be greater than zero");
        }
        if !(1..=OFFER_PER_ROUND_MAX).contains(&self.offer_per_round) {
            return invalid(
                "offer_per_round",
                self.offer_per_round,
                "must be from 1 to 10000",
            );
        }
        if self.faults > faults::FAULTS_MAX {
            return invalid("faults", self.faults as u64, "must be at most 64");
        }
        if self.latency_ms_base == 0 || self.latency_ms_max < self.latency_ms_base {
            return invalid(
                "latency_ms_max",
                self.latency_ms_max,
                "latencies must be positive with the base at most the maximum",
            );
        }
        self.validate_cluster()
    }

    fn validate_cluster(&self) -> Result<(), NetError> {
        if !(1..=cluster::CLUSTER_MAX).contains(&self.cluster) {
            return invalid("cluster", self.cluster as u64, "must be from 1 to 5");
        }
        if !(10..=1_000).contains(&self.raft_heartbeat_ms) {
            return invalid(
                "raft_heartbeat_ms",
                self.raft_heartbeat_ms,
                "must be from 10 to 1000",
            );
        }
        if let Some(at_ms) = self.leader_crash_at_ms {
            if self.cluster < 2 {
                return invalid(
                    "leader_crash_at_ms",
                    at_ms,
                    "needs a Raft cluster (cluster of 2 or more)",
                );
            }
            if at_ms >= self.duration_ms {
                return invalid("leader_crash_at_ms", at_ms, "must be before the run ends");
            }
        }
        if self.real_pause_every_ms != 0 && self.real_pause_every_ms < REAL_PAUSE_EVERY_MS_MIN {
            return invalid(
                "real_pause_every_ms",
                self.real_pause_every_ms,
                "must be zero (no pauses) or at least 100",
            );
        }
        if let Some(r) = &self.rollout {
            r.validate(self.duration_ms)?;
            if self.rollout_drawn {
                return invalid("rollout_drawn", 1, "a rollout is configured already");
            }
        }
        let drawn_min_ms = 3 * run::QUIET_MS + rollout::transition_ms(self);
        if self.rollout_drawn && self.duration_ms < drawn_min_ms {
            return invalid(
                "duration_ms",
                self.duration_ms,
                "too short for a drawn rollout and its transition",
            );
        }
        if self.clock_step_ms_max > clock::CLOCK_OFFSET_MS_MAX {
            return invalid(
                "clock_step_ms_max",
                self.clock_step_ms_max,
                "must be at most 600000",
            );
        }
        Ok(())
    }

    /// Refuses a window the ledger would not run, a start outside the calendar a run may
    /// use, and a window beside what its check does not cover: a rollout (whose check is
    /// per bucket version) or a region (whose own timeline would decide the agents' leases).
    fn validate_window(&self) -> Result<(), NetError> {
        if !(1..=START_UNIX_S_MAX).contains(&self.start_unix_s) {
            return invalid(
                "start_unix_s",
                self.start_unix_s,
                "must be from 1 to 4102444800 (2100-01-01)",
            );
        }
        let Some(w) = &self.window else {
            return Ok(());
        };
        if let Err((field, value, reason)) = w.validate() {
            return invalid(field, value, reason);
        }
        if self.rollout.is_some() || self.rollout_drawn {
            return invalid("window", 0, "a window policy's run has no rollout");
        }
        if self.region {
            return invalid("window", 0, "a window policy's run has no region");
        }
        Ok(())
    }

    /// Refuses a spray the run cannot carry out, and caps out of range.
    fn validate_spray(&self) -> Result<(), NetError> {
        if let Some(s) = &self.spray {
            if s.agent >= self.agents {
                return invalid("spray.agent", s.agent as u64, "no such agent in the run");
            }
            if !(1..=OFFER_PER_ROUND_MAX).contains(&s.keys_per_round) {
                return invalid(
                    "spray.keys_per_round",
                    s.keys_per_round,
                    "must be from 1 to 10000",
                );
            }
            if s.from_ms >= s.until_ms {
                return invalid("spray.until_ms", s.until_ms, "must be after from_ms");
            }
        }
        if self.agent_key_idle_ms == Some(0) {
            return invalid("agent_key_idle_ms", 0, "must be positive");
        }
        if self.agent_keys_max == Some(0) {
            return invalid("agent_keys_max", 0, "must be positive");
        }
        if self.grantor_keys_max == Some(0) {
            return invalid("grantor_keys_max", 0, "must be positive");
        }
        if self.grantor_keys_max.is_some() && self.cluster > 1 {
            return invalid(
                "grantor_keys_max",
                self.cluster as u64,
                "is applied to a single-node allocator only",
            );
        }
        Ok(())
    }

    /// Refuses a scripted fault outside the run or naming a host the run does not have.
    fn validate_script(&self) -> Result<(), NetError> {
        if self.script.len() > 2 * faults::FAULTS_MAX {
            return invalid("script", self.script.len() as u64, "at most 128 actions");
        }
        for s in &self.script {
            if s.at_ms >= self.duration_ms {
                return invalid("script.at_ms", s.at_ms, "must be before the run ends");
            }
            let agent = match s.action {
                Action::Partition { agent }
                | Action::Repair { agent }
                | Action::Crash { agent }
                | Action::Restart { agent }
                | Action::ClockOffset { agent, .. } => Some(agent),
                _ => None,
            };
            if let Some(agent) = agent.filter(|&a| a >= self.agents) {
                return invalid("script.agent", agent as u64, "no such agent in the run");
            }
            let node = match s.action {
                Action::IsolateAllocator { node } | Action::RejoinAllocator { node } => Some(node),
                _ => None,
            };
            if let Some(node) = node.filter(|&n| n >= self.cluster) {
                return invalid("script.node", node as u64, "no such allocator in the run");
            }
            if s.action.is_allocator_fault() && self.cluster < 2 {
                return invalid(
                    "script.at_ms",
                    s.at_ms,
                    "allocator faults need a Raft cluster",
                );
            }
            if matches!(s.action, Action::PartitionRegion | Action::RepairRegion) && !self.region {
                return invalid("script.at_ms", s.at_ms, "region faults need a region");
            }
        }
        Ok(())
    }
}

/// Refuses the run: `field` = `value` is out of range for `reason`.
fn invalid(field: &'static str, value: u64, reason: &'static str) -> Result<(), NetError> {
    Err(NetError::InvalidConfig {
        field,
        value,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Scheduled, Spray};
    use super::*;

    /// The field a refused configuration names.
    fn refused_field(cfg: NetConfig) -> &'static str {
        match cfg.validate() {
            Err(NetError::InvalidConfig { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_quick_configurations_are_accepted() {
        NetConfig::quick().validate().unwrap();
        NetConfig::quick_cluster().validate().unwrap();
    }

    #[test]
    fn scripted_faults_sprays_and_horizons_out_of_range_are_refused_by_name() {
        let q = NetConfig::quick();
        let script = |action| NetConfig {
            script: vec![Scheduled {
                at_ms: 2_000,
                action,
            }],
            ..NetConfig::quick()
        };
        assert_eq!(
            refused_field(script(Action::Crash { agent: 3 })),
            "script.agent"
        );
        assert_eq!(
            refused_field(script(Action::IsolateAllocator { node: 0 })),
            "script.at_ms"
        );
        let cluster = NetConfig::quick_cluster();
        assert_eq!(
            refused_field(NetConfig {
                script: vec![Scheduled {
                    at_ms: 2_000,
                    action: Action::IsolateAllocator {
                        node: cluster.cluster
                    },
                }],
                ..cluster
            }),
            "script.node"
        );
        assert_eq!(
            refused_field(NetConfig {
                script: vec![Scheduled {
                    at_ms: q.duration_ms,
                    action: Action::Repair { agent: 0 },
                }],
                ..q.clone()
            }),
            "script.at_ms"
        );
        let spray = Spray {
            agent: 0,
            keys_per_round: 5,
            from_ms: 3_000,
            until_ms: 2_000,
        };
        assert_eq!(
            refused_field(NetConfig {
                spray: Some(spray),
                ..q.clone()
            }),
            "spray.until_ms"
        );
        assert_eq!(
            refused_field(NetConfig {
                refresh_horizon_ms: q.lease_ttl_ms,
                ..q.clone()
            }),
            "refresh_horizon_ms"
        );
        assert_eq!(
            refused_field(NetConfig {
                grantor_keys_max: Some(10),
                ..NetConfig::quick_cluster()
            }),
            "grantor_keys_max"
        );
    }

    #[test]
    fn windows_the_run_cannot_check_are_refused_by_name() {
        let fixed = NetConfig {
            window: Some(super::super::Window::Fixed {
                window_ms: 10_000,
                limit: 100,
            }),
            ..NetConfig::quick_cluster()
        };
        fixed.validate().unwrap();
        assert!(fixed.policy_yaml().contains("algorithm: fixed_window"));
        let short = NetConfig {
            window: Some(super::super::Window::Fixed {
                window_ms: 999,
                limit: 100,
            }),
            ..fixed.clone()
        };
        assert_eq!(refused_field(short), "window.window_ms");
        let region = NetConfig {
            region: true,
            ..fixed.clone()
        };
        assert_eq!(refused_field(region), "window");
        let late = NetConfig {
            start_unix_s: START_UNIX_S_MAX + 1,
            ..fixed
        };
        assert_eq!(refused_field(late), "start_unix_s");
    }
}
