//! Enforcer crashes: one agent dies holding credit it has not spent, another right after
//! spending all of its credit in a burst it never reported. Either way the credit stays
//! booked at the grantor until the lease expires and is then written off as stranded, so
//! it is never granted twice, and the bound holds.

use super::seconds::seconds;
use super::{Chart, LineStyle, RunOptions, ScenarioReport, Series};
use crate::error::SimError;
use crate::hierarchy::{CrashKind, Fault, Hierarchy, HierarchyConfig};
use crate::promises::Promise;

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        duration_s: s.pick(40, 14),
        zipf_exponent_pct: 0,
        load_factor_pct: 120,
        crash_agent_at_s: None,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg.clone())?;
    let every_ms = s.pick(8_000, 3_000);
    let kinds = [CrashKind::UnusedCredit, CrashKind::JustSpent];
    for i in 0..4u64 {
        let crash = Fault::Crash {
            agent: (i as usize * 3) % cfg.agents(),
            kind: kinds[i as usize % 2],
        };
        sim.schedule((i + 1) * every_ms, crash)?;
    }
    sim.run();
    let mut series = Series::new(&[
        "t_s",
        "offered",
        "admitted",
        "bound_1s",
        "stranded",
        "root_outstanding",
    ]);
    for sec in seconds(&sim) {
        series.push(vec![
            sec.t_s,
            sec.offered,
            sec.admitted,
            sec.bound_1s,
            sec.stranded,
            sec.root_outstanding,
        ]);
    }
    let v = sim.levels();
    let mut report = ScenarioReport {
        scenario: "crash".into(),
        seed: opts.seed,
        title: "Enforcer crashes with unused and with just-spent credit".into(),
        about: "Eight agents share R = 1000 units/s at 120% load. Every few seconds an agent \
                crashes and restarts as a new holder: alternately holding credit it has not \
                spent, and right after spending all of it in one unreported burst. The checker \
                confirms that each crashed lease stays booked at its grantor until it expires \
                (its credit is never granted again early), that every ledger conserves its units, \
                and that the burst stays within the bound."
            .into(),
        checked: Promise::MODEL.to_vec(),
        promises: sim.promises(),
        facts: Vec::new(),
        series,
        chart: Chart::new(
            "Admissions and stranded credit through crashes",
            "time (s)",
            "units",
        )
        .line("admitted", "admitted per second", LineStyle::Solid)
        .line("stranded", "stranded (cumulative)", LineStyle::Solid)
        .line(
            "root_outstanding",
            "outstanding at the root",
            LineStyle::Solid,
        )
        .line("bound_1s", "B + R·1s", LineStyle::Dashed),
    };
    report.fact("crashes", 4);
    report.fact("admitted", v.agents.admitted);
    report.fact("stranded at the root", v.root_stranded);
    report.fact("stranded in regions", v.regions_stranded);
    report.fact("bound over the run (B + R·T)", sim.bound());
    Ok(report)
}
