//! Lease size against grantor load and stranded credit, beside the pattern text's §9
//! model: allocator QPS ≈ admitted units/s ÷ average lease size. Larger leases mean fewer
//! requests but more credit stranded when a holder crashes.

use super::{Chart, LineStyle, RunOptions, ScenarioReport, Series};
use crate::error::SimError;
use crate::hierarchy::{CrashKind, Fault, Hierarchy, HierarchyConfig};
use crate::promises::{Promise, PromiseLog};

/// One point of the sweep.
struct Point {
    report_every_ms: u64,
    /// The lease size the sizing aims at: one agent's demand over the refresh horizon.
    lease_size: u64,
    /// Credit actually granted per request.
    granted_per_request: u64,
    admitted_per_s: u64,
    region_qps: u64,
    root_qps: u64,
    model_qps: u64,
    stranded: u64,
}

fn run_point(opts: &RunOptions, report_every_ms: u64) -> Result<(Point, PromiseLog), SimError> {
    let s = opts.scale;
    let agent_ttl_ms = (4 * report_every_ms).max(2_000);
    let cfg = HierarchyConfig {
        seed: opts.seed,
        duration_s: s.pick(30, 10),
        report_every_ms,
        agent_ttl_ms,
        root_ttl_ms: 2 * agent_ttl_ms,
        zipf_exponent_pct: 0,
        load_factor_pct: 100,
        crash_agent_at_s: None,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg.clone())?;
    let every_ms = s.pick(5_000, 2_500);
    let mut at = every_ms;
    let mut i = 0;
    while at < cfg.duration_s * 1_000 {
        let crash = Fault::Crash {
            agent: (i * 5) % cfg.agents(),
            kind: CrashKind::UnusedCredit,
        };
        sim.schedule(at, crash)?;
        at += every_ms;
        i += 1;
    }
    sim.run();
    let v = sim.levels();
    let secs = cfg.duration_s;
    let region_requests: u64 = sim.records().iter().map(|r| r.region_requests).sum();
    let root_requests: u64 = sim.records().iter().map(|r| r.root_requests).sum();
    let admitted_per_s = v.agents.admitted / secs;
    let lease_size = (admitted_per_s * cfg.horizon_ms() / 1_000 / cfg.agents() as u64).max(1);
    let point = Point {
        report_every_ms,
        lease_size,
        granted_per_request: v.regions_granted / region_requests.max(1),
        admitted_per_s,
        region_qps: region_requests / secs,
        root_qps: root_requests / secs,
        model_qps: admitted_per_s / lease_size,
        stranded: v.root_stranded + v.regions_stranded,
    };
    Ok((point, sim.promises()))
}

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let intervals: &[u64] = opts
        .scale
        .pick(&[50, 100, 250, 500, 1_000], &[100, 250, 500]);
    let mut promises = PromiseLog::default();
    let mut series = Series::new(&[
        "lease_size",
        "report_every_ms",
        "granted_per_request",
        "admitted_per_s",
        "region_qps",
        "model_qps",
        "root_qps",
        "stranded",
    ]);
    let mut points = Vec::new();
    for &ms in intervals {
        let (p, log) = run_point(opts, ms)?;
        promises.merge(&log);
        series.push(vec![
            p.lease_size,
            p.report_every_ms,
            p.granted_per_request,
            p.admitted_per_s,
            p.region_qps,
            p.model_qps,
            p.root_qps,
            p.stranded,
        ]);
        points.push(p);
    }
    let mut report = ScenarioReport {
        scenario: "lease-size".into(),
        seed: opts.seed,
        title: "Lease size against grantor load and stranded credit".into(),
        about: "Eight agents offer R = 1000 units/s; the refresh horizon (and so the lease size, \
                one agent's demand over the horizon) grows across the sweep, and an agent crashes \
                every few seconds. The §9 model predicts allocator QPS ≈ admitted units/s ÷ lease \
                size. Measured requests to the regions run above it: holders also report on a \
                timer and refresh before they run dry. Stranded credit grows with lease size: each \
                crash strands what its lease still held. At the largest size leases approach \
                the burst, holders wait on each other's credit and fewer units are admitted: \
                large leases reserve capacity that sits unused."
            .into(),
        checked: Promise::MODEL.to_vec(),
        promises,
        facts: Vec::new(),
        series,
        chart: Chart::new(
            "Grantor load and stranded credit against lease size",
            "lease size (units)",
            "requests/s, units",
        )
        .line(
            "region_qps",
            "requests to regions per second",
            LineStyle::Solid,
        )
        .line(
            "model_qps",
            "§9 model: admitted/s ÷ lease size",
            LineStyle::Dashed,
        )
        .line("stranded", "stranded units over the run", LineStyle::Solid),
    };
    for p in &points {
        report.fact(
            &format!("lease size {} units", p.lease_size),
            format!(
                "{} admitted/s; {} req/s measured, {} predicted; {} stranded",
                p.admitted_per_s, p.region_qps, p.model_qps, p.stranded
            ),
        );
    }
    Ok(report)
}
