//! Fuzz mode: random fault schedules over many seeds. Each seed derives a configuration and
//! a schedule of crashes, partitions, clock steps, leader losses, rollouts and demand
//! shifts from itself alone, so a failing seed replays exactly with `run fuzz --seed N`.

use super::seconds::offered_admitted_chart;
use super::{RunOptions, Scale, ScenarioReport};
use crate::error::SimError;
use crate::hierarchy::{CrashKind, Defect, Fault, Hierarchy, HierarchyConfig, LeaderLoss};
use leasehold_common::policy::FailureMode;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Most faults one seed schedules.
pub const FAULTS_MAX: u64 = 12;

/// The configuration and faults seed `seed` stands for.
pub fn case(seed: u64, scale: Scale, defect: Option<Defect>) -> Result<Hierarchy, SimError> {
    // A separate stream from the hierarchy's own (which is seeded with `seed` too).
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_f022);
    let modes = [
        FailureMode::FailClosed,
        FailureMode::CachedLease,
        FailureMode::FailOpen,
        FailureMode::Restricted,
    ];
    let cfg = HierarchyConfig {
        seed,
        regions: rng.random_range(1..=3),
        agents_per_region: rng.random_range(1..=4),
        duration_s: scale.pick(30, 8),
        load_factor_pct: rng.random_range(30..=250),
        zipf_exponent_pct: rng.random_range(0..=150),
        hot_spot_every_s: rng.random_range(2..=10),
        report_every_ms: [100, 250, 500][rng.random_range(0..3)],
        crash_agent_at_s: None,
        failure: modes[rng.random_range(0..modes.len())],
        defect,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg.clone())?;
    let end_ms = cfg.duration_s * 1_000;
    for _ in 0..rng.random_range(3..=FAULTS_MAX) {
        let at = rng.random_range(0..end_ms);
        let heal_at = (at + rng.random_range(200..5_000)).min(end_ms);
        let agent = rng.random_range(0..cfg.agents());
        let region = rng.random_range(0..cfg.regions);
        match rng.random_range(0..8) {
            0 => {
                let kind = [CrashKind::UnusedCredit, CrashKind::JustSpent][rng.random_range(0..2)];
                sim.schedule(at, Fault::Crash { agent, kind })?;
            }
            1 => {
                sim.schedule(at, Fault::PartitionAgent { agent, cut: true })?;
                sim.schedule(heal_at, Fault::PartitionAgent { agent, cut: false })?;
            }
            2 => {
                sim.schedule(at, Fault::PartitionRegion { region, cut: true })?;
                sim.schedule(heal_at, Fault::PartitionRegion { region, cut: false })?;
            }
            3 => {
                let back_ms = rng.random_range(1..10_000);
                sim.schedule(at, Fault::AgentClockBack { agent, back_ms })?;
            }
            4 => {
                let back_ms = rng.random_range(1..10_000);
                sim.schedule(at, Fault::RegionClockBack { region, back_ms })?;
            }
            5 => {
                let loss = [LeaderLoss::GrantLost, LeaderLoss::GrantKept][rng.random_range(0..2)];
                sim.schedule(at, Fault::LeaderLoss(loss))?;
            }
            6 => {
                let load_factor_pct = rng.random_range(10..=300);
                sim.schedule(at, Fault::Load { load_factor_pct })?;
            }
            _ => {
                let rollout = Fault::Rollout {
                    rate_per_sec: rng.random_range(200..=2_000),
                    burst: rng.random_range(200..=4_000),
                };
                sim.schedule(at, rollout)?;
            }
        }
    }
    Ok(sim)
}

/// Runs seed `seed`'s case to the end.
pub fn run_case(seed: u64, scale: Scale, defect: Option<Defect>) -> Result<Hierarchy, SimError> {
    let mut sim = case(seed, scale, defect)?;
    sim.run();
    Ok(sim)
}

/// The `fuzz` scenario: one seed's case, as a report.
pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let sim = run_case(opts.seed, opts.scale, None)?;
    let cfg = sim.config();
    let v = sim.levels();
    let mut report = ScenarioReport::standard(
        &sim,
        ("fuzz", opts.seed),
        format!("Random faults, seed {}", opts.seed),
        "A configuration (regions, agents, load, skew, report interval, failure \
                behaviour) and up to a dozen faults drawn from the seed alone: crashes with \
                unused or just-spent credit, agent and region partitions, clock steps back of up \
                to 10 s, root leader losses with the grant lost or kept, policy rollouts and \
                demand shifts. Every promise is checked throughout.",
        offered_admitted_chart(
            "Admissions under random faults",
            "B + r·1s of the version in force",
        ),
    );
    report.fact(
        "regions × agents",
        format!("{} × {}", cfg.regions, cfg.agents_per_region),
    );
    report.fact("failure behaviour", format!("{:?}", cfg.failure));
    report.fact("policy versions", sim.epochs().len());
    report.fact("admitted", v.agents.admitted);
    report.fact("fail-open admissions (uncharged)", v.agents.fail_open);
    report.fact("emergency admissions (uncharged)", v.agents.restricted);
    report.fact("clock steps back detected", sim.clock_steps_back());
    report.fact("leader losses", sim.leader_losses());
    Ok(report)
}
