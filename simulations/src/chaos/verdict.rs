//! The end of a chaos run: every process healed and the agents stopped cleanly (they
//! release what they hold), then every window of every key checked against `B + r·T` from
//! the generator's records, the ledgers of all nodes compared with each other and with
//! what the generator saw admitted, and the usage the replicated state booked with the
//! ledger; the same for the region and the admissions of its agents.

use super::cluster::ProcCluster;
use super::error::ChaosError;
use super::faults::World;
use super::run::{ChaosConfig, POLICY_ID};
use super::traffic::{Counts, Records};
use super::windows::{check_key, check_key_bracketed, WindowCheck};
use crate::live::scrape::ClusterFigures;
use leasehold_common::rate::Rate;
use leasehold_proto::leasehold::v1 as pb;
use serde::Serialize;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    /// Per tenant, each decision placed anywhere between its request and its answer.
    pub windows: Vec<WindowCheck>,
    pub violations: u64,
    /// Per tenant, the windows over the bound when each decision is placed at its answer;
    /// more than `violations` only where an answer came late (an agent stopped between
    /// deciding and answering).
    pub at_answer: Vec<WindowCheck>,
    /// Each node's figures for the policy once they agreed (or the last seen).
    pub ledgers: Vec<(u64, ClusterFigures)>,
    pub ledgers_identical: bool,
    /// Every admitted unit is in the ledger as used, stranded or still outstanding, and
    /// those never exceed what was granted.
    pub conserved: bool,
    pub agents_stopped_cleanly: usize,
    /// The policy's usage over the run as the leader's replicated state books it (`leasectl
    /// usage`), None when no leader answered.
    pub usage: Option<UsageFigures>,
    /// The usage booked matches the converged ledger: admitted units equal what the
    /// ledger counts used, stranded units what it wrote off.
    pub usage_matches: bool,
    /// The same checks at the region, for the admissions of its agents; None without one.
    pub region: Option<LevelCheck>,
    pub passed: bool,
}

/// One cluster's ledgers, conservation and usage against the admissions of the agents
/// below it.
#[derive(Debug, Serialize)]
pub struct LevelCheck {
    /// Admitted at the generator through the agents this cluster serves.
    pub admitted: u64,
    pub ledgers: Vec<(u64, ClusterFigures)>,
    pub ledgers_identical: bool,
    pub conserved: bool,
    pub usage: Option<UsageFigures>,
    pub usage_matches: bool,
}

impl LevelCheck {
    fn passed(&self) -> bool {
        self.ledgers_identical && self.conserved && self.usage_matches && !self.ledgers.is_empty()
    }
}

/// Totals of `AdminService.Usage` for the run's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UsageFigures {
    pub admitted: u64,
    pub refused: u64,
    pub fail_open: u64,
    pub stranded: u64,
}

/// How far back the usage asked for reaches: far beyond any run, so that every bucket of
/// the run is covered whatever the hour.
const USAGE_SPAN_MS: u64 = 24 * 3_600_000;

async fn usage(cluster: &ProcCluster) -> Option<UsageFigures> {
    let leader = cluster.leader().await?;
    let mut admin = cluster.admin(leader).ok()?;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_millis() as u64;
    let req = pb::UsageRequest {
        policy_id: POLICY_ID.into(),
        since_ms: now_ms - USAGE_SPAN_MS,
        until_ms: now_ms + 3_600_000,
        ..Default::default()
    };
    let total = admin.usage(req).await.ok()?.into_inner().total?;
    Some(UsageFigures {
        admitted: total.admitted,
        refused: total.refused,
        fail_open: total.fail_open,
        stranded: total.stranded,
    })
}

async fn converged(cluster: &ProcCluster) -> (bool, Vec<(u64, ClusterFigures)>) {
    let started = Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < Duration::from_millis(CONVERGE_WAIT_MS) {
        let figures = cluster.figures(POLICY_ID).await;
        last = figures
            .into_iter()
            .filter_map(|(id, f)| f.ok().map(|f| (id, f)))
            .collect::<Vec<_>>();
        let same = last.windows(2).all(|w| w[0].1 == w[1].1);
        if last.len() == cluster.nodes.len() && same {
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
        .admitted_sent_ns
        .iter()
        .zip(&records.admitted_ns)
        .map(|(sent, at)| check_key_bracketed(sent, at, rate, cfg.burst))
        .collect();
    let at_answer: Vec<WindowCheck> = records
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
    let region_admitted: u64 = records.agent_admitted_ns[..world.region_agents]
        .iter()
        .map(|a| a.len() as u64)
        .sum();
    let region = match &world.region {
        Some(region) => Some(check_level(region, region_admitted).await?),
        None => None,
    };
    // Every admission, the region's agents' too, spends credit the root granted.
    let root = check_level(&world.cluster, records.counts.admitted).await?;
    Ok(Verdict {
        counts: records.counts,
        utilisation,
        windows,
        violations,
        at_answer,
        passed: violations == 0 && root.passed() && region.as_ref().is_none_or(LevelCheck::passed),
        ledgers: root.ledgers,
        ledgers_identical: root.ledgers_identical,
        conserved: root.conserved,
        agents_stopped_cleanly,
        usage: root.usage,
        usage_matches: root.usage_matches,
        region,
    })
}

/// Waits for `cluster` to heal and its nodes to agree, then checks its ledger and usage
/// against `admitted` units.
async fn check_level(cluster: &ProcCluster, admitted: u64) -> Result<LevelCheck, ChaosError> {
    cluster.wait_healthy(CONVERGE_WAIT_MS).await?;
    let (ledgers_identical, ledgers) = converged(cluster).await;
    let conserved = ledgers.iter().all(|(_, f)| {
        let accounted = f.used + f.stranded + f.outstanding;
        admitted <= accounted && accounted <= f.granted
    });
    // Usage lives in the replicated state, so every failover of the run is behind it.
    let usage = usage(cluster).await;
    let usage_matches = match (usage, ledgers.first()) {
        (Some(u), Some((_, f))) => u.admitted == f.used && u.stranded == f.stranded,
        _ => false,
    };
    Ok(LevelCheck {
        admitted,
        ledgers,
        ledgers_identical,
        conserved,
        usage,
        usage_matches,
    })
}
