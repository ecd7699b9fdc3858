//! Partitions under each failure behaviour: the agents of region 0 lose their region, and
//! later region 1 loses the root. `fail_closed`, `cached_lease` and `restricted` keep P1
//! for charged credit; `fail_open` admits uncharged and its admissions are counted apart
//! (and may exceed the bound, as that policy chooses).

use super::seconds::seconds;
use super::{Chart, LineStyle, RunOptions, ScenarioReport, Series};
use crate::bound::check_windows;
use crate::error::SimError;
use crate::hierarchy::{Fault, Hierarchy, HierarchyConfig, StepTotals};
use crate::promises::{Promise, PromiseLog};
use leasehold_common::policy::FailureMode;

const MODES: [(FailureMode, &str); 4] = [
    (FailureMode::FailClosed, "fail_closed"),
    (FailureMode::CachedLease, "cached_lease"),
    (FailureMode::FailOpen, "fail_open"),
    (FailureMode::Restricted, "restricted"),
];

/// One run under one failure behaviour.
struct ModeRun {
    sim: Hierarchy,
    /// Charged plus fail-open admissions per step.
    with_fail_open: Vec<u64>,
}

fn run_mode(opts: &RunOptions, mode: FailureMode) -> Result<ModeRun, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        duration_s: s.pick(45, 16),
        crash_agent_at_s: None,
        failure: mode,
        ..HierarchyConfig::default()
    };
    let (a0, a1) = (s.pick(10_000, 4_000), s.pick(20_000, 8_000));
    let (r0, r1) = (s.pick(25_000, 10_000), s.pick(35_000, 14_000));
    let mut sim = Hierarchy::new(cfg.clone())?;
    for agent in 0..cfg.agents_per_region {
        sim.schedule(a0, Fault::PartitionAgent { agent, cut: true })?;
        sim.schedule(a1, Fault::PartitionAgent { agent, cut: false })?;
    }
    sim.schedule(
        r0,
        Fault::PartitionRegion {
            region: 1,
            cut: true,
        },
    )?;
    sim.schedule(
        r1,
        Fault::PartitionRegion {
            region: 1,
            cut: false,
        },
    )?;
    let mut with_fail_open = Vec::new();
    while !sim.done() {
        let t: StepTotals = sim.step();
        with_fail_open.push(t.admitted + t.fail_open);
    }
    Ok(ModeRun {
        sim,
        with_fail_open,
    })
}

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let runs = MODES
        .iter()
        .map(|(m, _)| run_mode(opts, *m))
        .collect::<Result<Vec<_>, _>>()?;
    let mut cols = vec!["t_s"];
    cols.extend(MODES.iter().map(|(_, n)| *n));
    cols.extend(["fail_open_uncharged", "restricted_uncharged", "bound_1s"]);
    let region0: Vec<String> = MODES.iter().map(|(_, n)| format!("region0_{n}")).collect();
    cols.extend(region0.iter().map(String::as_str));
    let mut series = Series::new(&cols);
    let secs: Vec<_> = runs.iter().map(|r| seconds(&r.sim)).collect();
    let per_s = (1_000 / runs[0].sim.config().step_ms) as usize;
    for i in 0..secs[0].len() {
        let mut row = vec![secs[0][i].t_s];
        row.extend(secs.iter().map(|s| s[i].admitted));
        row.extend([
            secs[2][i].fail_open,
            secs[3][i].restricted,
            secs[0][i].bound_1s,
        ]);
        for r in &runs {
            let s = r.sim.region_series(0);
            row.push(s.iter().skip(i * per_s).take(per_s).sum());
        }
        series.push(row);
    }
    let mut promises = PromiseLog::default();
    for r in &runs {
        promises.merge(&r.sim.promises());
    }
    let mut report = ScenarioReport {
        scenario: "partition".into(),
        seed: opts.seed,
        title: "Partitions under each failure behaviour".into(),
        about: "Eight agents in two regions share R = 1000 units/s at 150% load. The four agents \
                of region 0 lose their region for a while; later region 1 loses the root. The \
                same seed runs once per failure behaviour. fail_closed stops at once, \
                cached_lease spends the credit it holds until the lease runs out, restricted \
                admits critical traffic at a local emergency rate (uncharged, counted apart), \
                and fail_open admits everything uncharged, counted apart. A region cut off from \
                the root keeps sub-leasing what it holds until its own lease runs out."
            .into(),
        checked: Promise::MODEL.to_vec(),
        promises,
        facts: Vec::new(),
        series,
        chart: Chart::new(
            "Region 0's admissions per second, by failure behaviour",
            "time (s)",
            "units per second",
        )
        .line("region0_fail_closed", "fail_closed", LineStyle::Solid)
        .line("region0_cached_lease", "cached_lease", LineStyle::Solid)
        .line("region0_fail_open", "fail_open (charged)", LineStyle::Solid)
        .line(
            "region0_restricted",
            "restricted (charged)",
            LineStyle::Solid,
        )
        .line(
            "fail_open_uncharged",
            "fail_open (uncharged)",
            LineStyle::Dashed,
        )
        .line(
            "restricted_uncharged",
            "restricted (uncharged)",
            LineStyle::Dashed,
        ),
    };
    for ((_, name), r) in MODES.iter().zip(&runs) {
        let v = r.sim.levels().agents;
        report.fact(&format!("{name}: charged admissions"), v.admitted);
        report.fact(&format!("{name}: rejected"), v.rejected);
        if v.fail_open > 0 || *name == "fail_open" {
            let cfg = r.sim.config();
            let c = check_windows(&r.with_fail_open, cfg.step_ns(), cfg.rate(), cfg.burst);
            report.fact(
                &format!("{name}: fail-open admissions (uncharged)"),
                v.fail_open,
            );
            report.fact(
                &format!("{name}: windows over bound counting fail-open"),
                c.violations,
            );
        }
        if *name == "restricted" {
            report.fact(
                &format!("{name}: emergency admissions (uncharged)"),
                v.restricted,
            );
        }
    }
    Ok(report)
}
