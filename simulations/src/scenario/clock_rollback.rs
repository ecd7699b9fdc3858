//! Clocks step back at agents and at a region. Each participant detects the step, keeps
//! its timeline from running back, and measures lease deadlines so they are not extended:
//! no credit is minted and nothing is spent after its lease expired.

use super::seconds::offered_admitted_chart;
use super::{RunOptions, ScenarioReport};
use crate::error::SimError;
use crate::hierarchy::{Fault, Hierarchy, HierarchyConfig};
use crate::promises::Promise;

/// The scenario's run; `guard_only` reads clocks through the stalling guard alone.
fn run_with(opts: &RunOptions, guard_only: bool) -> Result<Hierarchy, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        duration_s: s.pick(40, 20),
        crash_agent_at_s: None,
        clock_guard_only: guard_only,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg.clone())?;
    let t = |full: u64, quick: u64| s.pick(full, quick);
    for agent in 0..cfg.agents_per_region {
        let back = Fault::AgentClockBack {
            agent,
            back_ms: 1_500 + 500 * agent as u64,
        };
        sim.schedule(t(10_000, 2_000), back)?;
    }
    let region_back = |back_ms| Fault::RegionClockBack { region: 0, back_ms };
    sim.schedule(t(20_000, 4_000), region_back(3_000))?;
    sim.schedule(t(30_000, 8_000), region_back(10_000))?;
    // Cut off while its clock is back, and with demand low so it still holds credit when
    // its root lease runs out, the region has only its own deadlines to go by.
    let cut = |cut| Fault::PartitionRegion { region: 0, cut };
    let load = |load_factor_pct| Fault::Load { load_factor_pct };
    sim.schedule(t(30_000, 8_000), cut(true))?;
    sim.schedule(t(30_000, 8_000), load(1))?;
    sim.schedule(t(38_000, 16_000), cut(false))?;
    sim.schedule(t(38_000, 16_000), load(cfg.load_factor_pct))?;
    sim.run();
    Ok(sim)
}

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let sim = run_with(opts, false)?;
    let stalled = run_with(opts, true)?.promises();
    let v = sim.levels();
    let mut report = ScenarioReport::standard(
        &sim,
        ("clock-rollback", opts.seed),
        "Clock rollback at agents and at a region",
        "The clocks of region 0's four agents step back by 1.5 to 3 s; later region 0's \
                own clock steps back by 3 s, and then by 10 s (longer than any lease) while the \
                region is cut off from the root and demand is low, so it still holds credit when \
                its root lease runs out. Each participant reads its clock through a guard that \
                detects the step, never lets its timeline run back, and keeps pace with true \
                time instead of stalling, so a lease deadline is never pushed out. The checker, \
                on the true clock, confirms nothing is spent after a lease expired, no unit is \
                minted, and the bound holds. For comparison the same run is repeated with \
                clocks read through the guard alone, which stalls through a step: the cut-off \
                region keeps sub-leasing credit of a root lease the root has already written \
                off, and the checker reports it under P2 and P3.",
        offered_admitted_chart("Admissions through clock steps", "B + R·1s"),
    );
    report.fact("steps back detected", sim.clock_steps_back());
    for p in [Promise::NoDoubleSpend, Promise::LeaseExpiry] {
        let name = format!("guard alone (stalling): {} violations", p.code());
        report.fact(&name, stalled.count(p));
    }
    report.fact("admitted", v.agents.admitted);
    report.fact("bound over the run (B + R·T)", sim.bound());
    Ok(report)
}
