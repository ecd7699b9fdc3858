//! Faults injected into a running hierarchy at chosen simulated times.

use super::agent::{CrashKind, Link};
use super::root::LeaderLoss;
use super::{Hierarchy, PolicyEpoch};
use crate::error::SimError;
use leasehold_common::ledger::{Command, PolicyParams};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use serde::Serialize;

/// Most faults one run may have scheduled at once.
pub const FAULTS_MAX: usize = 10_000;

/// One thing that goes wrong (or changes) during a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// An agent crashes and restarts as a new holder.
    Crash { agent: usize, kind: CrashKind },
    /// An agent is cut off from its region (`cut: false` heals it).
    PartitionAgent { agent: usize, cut: bool },
    /// A region is cut off from the root.
    PartitionRegion { region: usize, cut: bool },
    /// An agent's clock steps back.
    AgentClockBack { agent: usize, back_ms: u64 },
    /// A region's clock steps back.
    RegionClockBack { region: usize, back_ms: u64 },
    /// The root's leader is lost while it applies the next holder request.
    LeaderLoss(LeaderLoss),
    /// A new policy version at the root, effective now.
    Rollout { rate_per_sec: u64, burst: u64 },
    /// Offered load changes to `load_factor_pct` percent of the original rate.
    Load { load_factor_pct: u64 },
    /// Traffic spreads over agents `0..agents` (autoscaling).
    ScaleTo { agents: usize },
}

impl Hierarchy {
    /// Schedules `fault` at `at_ms` of simulated time (applied at the first step at or
    /// after it).
    pub fn schedule(&mut self, at_ms: u64, fault: Fault) -> Result<(), SimError> {
        self.validate_fault(&fault)?;
        if self.faults.len() >= FAULTS_MAX {
            return Err(SimError::config(
                "faults",
                self.faults.len(),
                "at most 10000 faults may be scheduled",
            ));
        }
        let pos = self.faults.partition_point(|(t, _)| *t <= at_ms);
        self.faults.insert(pos, (at_ms, fault));
        Ok(())
    }

    fn validate_fault(&self, fault: &Fault) -> Result<(), SimError> {
        let agents = self.agents.len();
        let regions = self.regions.len();
        let agent_ok = |agent: usize| {
            (agent < agents)
                .then_some(())
                .ok_or(SimError::NoSuchAgent { agent, agents })
        };
        let region_ok = |region: usize| {
            (region < regions)
                .then_some(())
                .ok_or(SimError::NoSuchRegion { region, regions })
        };
        match *fault {
            Fault::Crash { agent, .. }
            | Fault::PartitionAgent { agent, .. }
            | Fault::AgentClockBack { agent, .. } => agent_ok(agent),
            Fault::PartitionRegion { region, .. } | Fault::RegionClockBack { region, .. } => {
                region_ok(region)
            }
            Fault::ScaleTo { agents: n } if n > agents => Err(SimError::config(
                "ScaleTo.agents",
                n,
                "exceeds the agents configured",
            )),
            Fault::Rollout {
                rate_per_sec: 0, ..
            } => Err(SimError::config(
                "Rollout.rate_per_sec",
                0,
                "must be positive",
            )),
            Fault::Rollout { burst: 0, .. } => {
                Err(SimError::config("Rollout.burst", 0, "must be positive"))
            }
            _ => Ok(()),
        }
    }

    /// Applies every fault due by now; returns units admitted by crash bursts.
    pub(super) fn apply_due_faults(&mut self) -> u64 {
        let now_ms = self.now_ns / 1_000_000;
        let due = self.faults.partition_point(|(t, _)| *t <= now_ms);
        let mut burst = 0;
        for (_, fault) in self.faults.drain(..due).collect::<Vec<_>>() {
            burst += self.apply_fault(fault);
        }
        burst
    }

    fn apply_fault(&mut self, fault: Fault) -> u64 {
        match fault {
            Fault::Crash { agent, kind } => {
                let a = &mut self.agents[agent];
                let region = &mut self.regions[a.region()];
                let region_now = region.now(self.now_ns);
                let link = Link {
                    ledger: region.ledger_mut(),
                    root: self.root.ledger(),
                    region_now,
                    true_ns: self.now_ns,
                    witness: &mut self.witness,
                };
                return a.crash(kind, link);
            }
            Fault::PartitionAgent { agent, cut } => self.agents[agent].set_partitioned(cut),
            Fault::PartitionRegion { region, cut } => self.regions[region].set_partitioned(cut),
            Fault::AgentClockBack { agent, back_ms } => self.agents[agent]
                .clock_mut()
                .step_back(back_ms * 1_000_000),
            Fault::RegionClockBack { region, back_ms } => self.regions[region]
                .clock_mut()
                .step_back(back_ms * 1_000_000),
            Fault::LeaderLoss(loss) => self.root.arm(loss),
            Fault::Rollout {
                rate_per_sec,
                burst,
            } => self.roll_out(rate_per_sec, burst),
            Fault::Load { load_factor_pct } => self
                .traffic
                .set_load(self.cfg.rate_per_sec, load_factor_pct),
            Fault::ScaleTo { agents } => self.traffic.set_active(agents),
        }
        0
    }

    fn roll_out(&mut self, rate_per_sec: u64, burst: u64) {
        let rate = Rate::per_second(rate_per_sec).expect("validated positive");
        let mut params = PolicyParams {
            version: self.params.version + 1,
            rate,
            burst,
            ..self.params.clone()
        };
        params.lease.max_credit = burst;
        let put = Command::PutPolicy(params.clone());
        self.root
            .ledger_mut()
            .apply(Nanos(self.now_ns), put)
            .expect("a newer version of a valid policy");
        self.params = params;
        self.epochs.push(PolicyEpoch {
            from_step: self.series.len(),
            rate,
            burst,
        });
    }
}
