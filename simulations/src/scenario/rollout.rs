//! A policy rollout under traffic: version 2 halves the rate and the burst. Credit already
//! out under version 1 may still be spent until its lease runs out (the transition); from
//! then on every window obeys the new `B₂ + r₂·T`.

use super::seconds::offered_admitted_chart;
use super::{RunOptions, ScenarioReport};
use crate::error::SimError;
use crate::hierarchy::{Fault, Hierarchy, HierarchyConfig};

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        duration_s: s.pick(45, 20),
        crash_agent_at_s: None,
        load_factor_pct: 180,
        ..HierarchyConfig::default()
    };
    let rollout_ms = s.pick(15_000, 6_000);
    let mut sim = Hierarchy::new(cfg.clone())?;
    let new = Fault::Rollout {
        rate_per_sec: cfg.rate_per_sec / 2,
        burst: cfg.burst / 2,
    };
    sim.schedule(rollout_ms, new)?;
    sim.run();
    let transition_ms = sim.transition_ns() / 1_000_000;
    let mut report = ScenarioReport::standard(
        &sim,
        ("rollout", opts.seed),
        "Policy rollout under traffic",
        "Traffic at 180% of R = 1000 units/s (burst 2000). Version 2 of the policy, with \
                half the rate and half the burst, takes effect at the root mid-run. Regions \
                renewing a version-1 lease are offered a version-2 replacement; they hand it \
                back, spend what the old lease holds until it runs out, then acquire under \
                version 2. The documented transition lasts one root lease lifetime plus the \
                write-off grace: windows starting in it may also spend the old version's \
                outstanding credit (at most B₁ on top of the new bound); every window starting \
                after it obeys B₂ + r₂·T.",
        offered_admitted_chart(
            "Admissions before and after the rollout",
            "B + r·1s of the version in force",
        ),
    );
    report.fact("rollout at (ms)", rollout_ms);
    report.fact("transition (ms)", transition_ms);
    report.fact("new bound holds from (ms)", rollout_ms + transition_ms);
    let per_s = 1_000 / cfg.step_ms as usize;
    let after = (rollout_ms + transition_ms).div_ceil(1_000) as usize * per_s;
    let tail = &sim.series()[after.min(sim.series().len())..];
    let secs = (tail.len() / per_s).max(1) as u64;
    report.fact(
        "admitted per second after the transition",
        tail.iter().sum::<u64>() / secs,
    );
    report.fact("new rate r₂ (units/s)", cfg.rate_per_sec / 2);
    Ok(report)
}
