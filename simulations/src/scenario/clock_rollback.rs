//! Clocks step back at agents and at a region. Each participant detects the step, keeps
//! its timeline from running back, and measures lease deadlines so they are not extended:
//! no credit is minted and nothing is spent after its lease expired.

use super::seconds::standard_series;
use super::{Chart, LineStyle, RunOptions, ScenarioReport};
use crate::error::SimError;
use crate::hierarchy::{Fault, Hierarchy, HierarchyConfig};
use crate::promises::Promise;

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        duration_s: s.pick(40, 14),
        crash_agent_at_s: None,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg.clone())?;
    let t = |full: u64, quick: u64| s.pick(full, quick);
    for agent in 0..cfg.agents_per_region {
        let back = Fault::AgentClockBack {
            agent,
            back_ms: 1_500 + 500 * agent as u64,
        };
        sim.schedule(t(10_000, 3_000), back)?;
    }
    let region_back = |back_ms| Fault::RegionClockBack { region: 0, back_ms };
    sim.schedule(t(20_000, 7_000), region_back(3_000))?;
    sim.schedule(t(30_000, 10_000), region_back(10_000))?;
    sim.run();
    let v = sim.levels();
    let mut report = ScenarioReport {
        scenario: "clock-rollback".into(),
        seed: opts.seed,
        title: "Clock rollback at agents and at a region".into(),
        about: "The clocks of region 0's four agents step back by 1.5 to 3 s; later region 0's \
                own clock steps back by 3 s and then by 10 s, longer than any lease. Each \
                participant reads its clock through a guard that detects the step, never lets \
                its timeline run back, and keeps pace with true time instead of stalling, so a \
                lease deadline is never pushed out. The checker, on the true clock, confirms \
                nothing is spent after a lease expired, no unit is minted, and the bound holds."
            .into(),
        checked: Promise::ALL.to_vec(),
        promises: sim.promises(),
        facts: Vec::new(),
        series: standard_series(&sim),
        chart: Chart::new(
            "Admissions through clock steps",
            "time (s)",
            "units per second",
        )
        .line("offered", "offered", LineStyle::Solid)
        .line("admitted", "admitted", LineStyle::Solid)
        .line("bound_1s", "B + R·1s", LineStyle::Dashed),
    };
    report.fact("steps back detected", sim.clock_steps_back());
    report.fact("admitted", v.agents.admitted);
    report.fact("bound over the run (B + R·T)", sim.bound());
    Ok(report)
}
