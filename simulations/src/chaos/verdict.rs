//! The end of a chaos run: every process healed and the agents stopped cleanly (they
//! release what they hold), then every window of every key checked against `B + r·T` from
//! the generator's records, and the ledgers of all nodes compared with each other and with
//! what the generator saw admitted.

use super::error::ChaosError;
use super::faults::World;
use super::run::{ChaosConfig, POLICY_ID};
use super::traffic::{Counts, Records};
use super::windows::{check_key, WindowCheck};
use crate::live::scrape::ClusterFigures;
use leasehold_common::rate::Rate;
use serde::Serialize;
use std::time::{Duration, Instant};

/// How long the nodes may take to agree on the ledger once traffic stops, in milliseconds.
const CONVERGE_WAIT_MS: u64 = 20_000;
/// How long an agent may take to release its leases and exit on SIGTERM, in milliseconds.
const AGENT_STOP_WAIT_MS: u64 = 10_000;

#[derive(Debug, Serialize)]
pub struct Verdict {
    /// At the generator.
    pub counts: Counts,
    /// Admitted over what `B + r·T` allows over the whole run, summed over the tenants.
    pub utilisation: f64,
    /// Per tenant.
    pub windows: Vec<WindowCheck>,
    pub violations: u64,
    /// Each node's figures for the policy once they agreed (or the last seen).
    pub ledgers: Vec<(u64, ClusterFigures)>,
    pub ledgers_identical: bool,
    /// Every admitted unit is in the ledger as used, stranded or still outstanding, and
    /// those never exceed what was granted.
    pub conserved: bool,
    pub agents_stopped_cleanly: usize,
    pub passed: bool,
}

async fn converged(world: &World) -> (bool, Vec<(u64, ClusterFigures)>) {
    let started = Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < Duration::from_millis(CONVERGE_WAIT_MS) {
        let figures = world.cluster.figures(POLICY_ID).await;
        last = figures
            .into_iter()
            .filter_map(|(id, f)| f.ok().map(|f| (id, f)))
            .collect::<Vec<_>>();
        let same = last.windows(2).all(|w| w[0].1 == w[1].1);
        if last.len() == world.cluster.nodes.len() && same {
            return (true, last);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (false, last)
}

/// Heals what is still broken, stops the agents and checks everything.
pub async fn verdict(
    world: &mut World,
    cfg: &ChaosConfig,
    records: &Records,
) -> Result<Verdict, ChaosError> {
    let rate = Rate::per_second(cfg.rate_per_sec).map_err(|e| ChaosError::InvalidConfig {
        field: "rate_per_sec",
        reason: e.to_string(),
    })?;
    let windows: Vec<WindowCheck> = records
        .admitted_ns
        .iter()
        .map(|at| check_key(at, rate, cfg.burst))
        .collect();
    let violations = windows.iter().map(|w| w.violations).sum();
    let run_ns = records.started.elapsed().as_nanos() as u64;
    let allowed = records.admitted_ns.len() as u64 * (cfg.burst + rate.units_in(run_ns));
    let utilisation = records.counts.admitted as f64 / allowed.max(1) as f64;
    let mut agents_stopped_cleanly = 0;
    for agent in &mut world.agents {
        if let Some(p) = agent.proc.take() {
            agents_stopped_cleanly += usize::from(p.terminate(AGENT_STOP_WAIT_MS));
        }
    }
    world.cluster.wait_healthy(CONVERGE_WAIT_MS).await?;
    let (ledgers_identical, ledgers) = converged(world).await;
    let admitted = records.counts.admitted;
    let conserved = ledgers.iter().all(|(_, f)| {
        let accounted = f.used + f.stranded + f.outstanding;
        admitted <= accounted && accounted <= f.granted
    });
    Ok(Verdict {
        counts: records.counts,
        utilisation,
        windows,
        violations,
        passed: violations == 0 && ledgers_identical && conserved && !ledgers.is_empty(),
        ledgers,
        ledgers_identical,
        conserved,
        agents_stopped_cleanly,
    })
}
