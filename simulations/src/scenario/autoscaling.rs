//! The pattern text's §8 trace: a tenant's traffic spreads over more gateway instances as
//! they scale up. With a process-local bucket per instance (each its own `R` and `B`) the
//! tenant's total grows with the instance count; with leased credit it stays within the
//! one global bound.

use super::seconds::seconds;
use super::{Chart, LineStyle, RunOptions, ScenarioReport, Series};
use crate::bound::{check_windows, peak_window};
use crate::error::SimError;
use crate::hierarchy::{Fault, Hierarchy, HierarchyConfig};
use crate::promises::Promise;
use leasehold_common::algo::TokenBucket;
use leasehold_common::time::Nanos;

/// Each instance's own bucket, as a process-local limiter would keep it.
struct Naive {
    buckets: Vec<Option<TokenBucket>>,
    series: Vec<u64>,
}

impl Naive {
    /// Splits `offered` evenly over the `active` instances; each admits what its bucket holds.
    fn step(&mut self, cfg: &HierarchyConfig, now: Nanos, offered: u64, active: usize) {
        let mut admitted = 0;
        for i in 0..active {
            let share = offered / active as u64 + u64::from((i as u64) < offered % active as u64);
            let b = self.buckets[i]
                .get_or_insert_with(|| TokenBucket::full(cfg.rate(), cfg.burst, now));
            b.refill(now);
            let take = share.min(b.tokens());
            b.take_exact(take);
            admitted += take;
        }
        self.series.push(admitted);
    }
}

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        regions: 2,
        agents_per_region: 6,
        active_agents: 4,
        duration_s: s.pick(45, 15),
        load_factor_pct: 1_500,
        zipf_exponent_pct: 0,
        crash_agent_at_s: None,
        ..HierarchyConfig::default()
    };
    let (rate, burst) = (cfg.rate_per_sec, cfg.burst);
    let mut sim = Hierarchy::new(cfg.clone())?;
    sim.schedule(s.pick(15_000, 5_000), Fault::ScaleTo { agents: 8 })?;
    sim.schedule(s.pick(25_000, 9_000), Fault::ScaleTo { agents: 12 })?;
    let mut naive = Naive {
        buckets: vec![None; cfg.agents()],
        series: Vec::new(),
    };
    while !sim.done() {
        let now = Nanos(sim.now_ns());
        let t = sim.step();
        let active = sim.records().last().map_or(0, |r| r.active_agents as usize);
        naive.step(&cfg, now, t.offered, active);
    }
    let per_s = (1_000 / cfg.step_ms) as usize;
    let mut series = Series::new(&[
        "t_s",
        "offered",
        "leased",
        "naive",
        "bound_1s",
        "instances_x_r",
    ]);
    for (i, sec) in seconds(&sim).iter().enumerate() {
        let naive_s: u64 = naive.series.iter().skip(i * per_s).take(per_s).sum();
        series.push(vec![
            sec.t_s,
            sec.offered,
            sec.admitted,
            naive_s,
            sec.bound_1s,
            sec.active_agents * rate,
        ]);
    }
    let naive_check = check_windows(&naive.series, cfg.step_ns(), cfg.rate(), burst);
    let naive_peak = peak_window(&naive.series, per_s);
    let leased_peak = peak_window(sim.series(), per_s);
    let mut report = ScenarioReport {
        scenario: "autoscaling".into(),
        seed: opts.seed,
        title: "Autoscaling multiplies a process-local limit".into(),
        about: "A tenant limited to R = 1000 units/s (burst 2000) offers 15R, spread evenly over \
                gateway instances that scale from 4 to 8 to 12. Process-local buckets, one per \
                instance, admit about N×R: 4R, then 8R, then 12R. Leased credit from one global \
                bucket admits R however many instances share it."
            .into(),
        checked: Promise::MODEL.to_vec(),
        promises: sim.promises(),
        facts: Vec::new(),
        series,
        chart: Chart::new(
            "Admitted per second as instances scale",
            "time (s)",
            "units per second",
        )
        .line("naive", "process-local buckets", LineStyle::Solid)
        .line("leased", "leased credit", LineStyle::Solid)
        .line("bound_1s", "B + R·1s", LineStyle::Dashed)
        .line("instances_x_r", "instances × R", LineStyle::Dashed),
    };
    report.fact("rate R (units/s)", rate);
    report.fact("naive peak (units in 1 s)", naive_peak);
    report.fact("naive peak ÷ R (%)", naive_peak * 100 / rate);
    report.fact("naive windows over B + R·T", naive_check.violations);
    report.fact("naive worst excess (units)", naive_check.worst_excess);
    report.fact("leased peak (units in 1 s)", leased_peak);
    report.fact("leased bound for 1 s (B + R)", burst + rate);
    Ok(report)
}
