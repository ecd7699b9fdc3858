//! Zipf-skewed demand over more than a hundred agents whose hot spots move: how much of
//! the bound the hierarchy puts to use while it follows the demand.

use super::seconds::offered_admitted_chart;
use super::{RunOptions, ScenarioReport};
use crate::error::SimError;
use crate::hierarchy::{Hierarchy, HierarchyConfig};

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        regions: 4,
        agents_per_region: s.pick(30, 26),
        duration_s: s.pick(60, 10),
        hot_spot_every_s: s.pick(10, 4),
        rate_per_sec: 5_000,
        burst: 10_000,
        load_factor_pct: 150,
        zipf_exponent_pct: 110,
        crash_agent_at_s: None,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg.clone())?;
    sim.run();
    let v = sim.levels();
    let bound = sim.bound();
    let servable = v.agents.offered.min(bound);
    let mut report = ScenarioReport::standard(
        &sim,
        ("zipf", opts.seed),
        "Zipf demand over many agents with moving hot spots",
        "A tenant limited to R = 5000 units/s (burst 10000) offers 150% of R over four \
                regions of agents, Zipf-distributed (exponent 1.1) so a few agents carry most of \
                it; every few seconds the ranking is reshuffled and the hot spots move. Leases \
                follow measured demand, idle credit flows back up, and the bound holds.",
        offered_admitted_chart("Offered and admitted per second, Zipf demand", "B + R·1s"),
    );
    report.fact("agents", cfg.agents());
    report.fact("offered", v.agents.offered);
    report.fact("admitted", v.agents.admitted);
    report.fact("bound over the run (B + R·T)", bound);
    report.fact(
        "utilisation of the bound (%)",
        v.agents.admitted * 100 / bound.max(1),
    );
    report.fact(
        "admitted of what the bound could serve (%)",
        v.agents.admitted * 100 / servable.max(1),
    );
    report.fact("stranded", v.root_stranded + v.regions_stranded);
    Ok(report)
}
