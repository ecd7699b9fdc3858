//! Lease size against grantor load and stranded credit on the production code, beside the
//! pattern text's §9 model: allocator QPS ≈ admitted units/s ÷ lease size. The lease size
//! follows the refresh horizon (a holder leases its demand over that long), swept here in
//! the policy and in the agents alike, while an agent crashes every few seconds and strands
//! what its leases still held.

use super::{promises, report, run};
use crate::error::SimError;
use crate::net::{Action, NetConfig, NetReport};
use crate::promises::PromiseLog;
use crate::scenario::{Chart, LineStyle, RunOptions, ScenarioReport, Series};

pub const NAME: &str = "net-lease-size";

/// Shortest lease lifetime of the sweep, in milliseconds; longer horizons get four of
/// themselves, so a holder has several chances to renew before its lease runs out.
const TTL_MS_MIN: u64 = 2_000;
/// A crashed agent's host stays down this long before it restarts, in milliseconds.
const DOWN_MS: u64 = 500;

/// One point of the sweep.
struct Point {
    horizon_ms: u64,
    ttl_ms: u64,
    admitted_per_s: u64,
    /// The lease size the sizing aims at: one agent's demand over the refresh horizon.
    lease_size: u64,
    calls_per_s: u64,
    model_calls_per_s: u64,
    granted_per_call: u64,
    stranded: u64,
    crashes: usize,
}

/// The run at refresh horizon `horizon_ms`, with its crash script.
fn config(opts: &RunOptions, horizon_ms: u64) -> NetConfig {
    let s = opts.scale;
    let agents = s.pick(8, 4);
    let duration_ms = s.pick(30_000, 10_000);
    let every_ms = s.pick(3_000, 2_500);
    let mut script = Vec::new();
    let mut at_ms = 2_000;
    let mut i = 0;
    // The last host is back up at least two seconds before the end.
    while at_ms + DOWN_MS + 2_000 <= duration_ms {
        let agent = (i * 3) % agents;
        script.extend(super::outage(
            at_ms,
            at_ms + DOWN_MS,
            Action::Crash { agent },
            Action::Restart { agent },
        ));
        at_ms += every_ms;
        i += 1;
    }
    // The agents together offer 1000 units/s, 80 % of the rate, so that leases can be
    // granted at the size the holders ask for.
    let rate_per_s = 1_250;
    NetConfig {
        agents,
        duration_ms,
        faults: 0,
        rate_per_s,
        burst: 2 * rate_per_s,
        lease_ttl_ms: (4 * horizon_ms).max(TTL_MS_MIN),
        refresh_horizon_ms: horizon_ms,
        holder_refresh_horizon_ms: Some(horizon_ms),
        report_every_ms: (horizon_ms / 2).max(1),
        offer_every_ms: agents as u64,
        offer_per_round: 1,
        script,
        ..NetConfig::quick()
    }
}

fn point(cfg: &NetConfig, r: &NetReport) -> Point {
    let secs = (cfg.duration_ms / 1_000).max(1);
    let admitted_per_s = r.admissions.len() as u64 / secs;
    let lease_size = (admitted_per_s * cfg.refresh_horizon_ms / 1_000 / cfg.agents as u64).max(1);
    let totals = r
        .grantor
        .as_ref()
        .map(|g| g.figures.clone())
        .unwrap_or_default();
    Point {
        horizon_ms: cfg.refresh_horizon_ms,
        ttl_ms: cfg.lease_ttl_ms,
        admitted_per_s,
        lease_size,
        calls_per_s: r.grantor_calls / secs,
        model_calls_per_s: admitted_per_s / lease_size,
        granted_per_call: totals.granted / r.grantor_calls.max(1),
        stranded: totals.stranded,
        crashes: r.settlements.len(),
    }
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let horizons: &[u64] = opts
        .scale
        .pick(&[100, 250, 500, 1_000, 2_000], &[100, 500, 1_000]);
    let mut log = PromiseLog::default();
    let mut series = Series::new(&[
        "lease_size",
        "horizon_ms",
        "ttl_ms",
        "admitted_per_s",
        "grantor_calls_per_s",
        "model_calls_per_s",
        "granted_per_call",
        "stranded",
    ]);
    let mut points = Vec::new();
    let mut first = None;
    for &h in horizons {
        let cfg = config(opts, h);
        let r = run(opts, &cfg)?;
        log.merge(&promises(&r, &format!("horizon {h} ms")));
        let p = point(&cfg, &r);
        series.push(vec![
            p.lease_size,
            p.horizon_ms,
            p.ttl_ms,
            p.admitted_per_s,
            p.calls_per_s,
            p.model_calls_per_s,
            p.granted_per_call,
            p.stranded,
        ]);
        points.push(p);
        first.get_or_insert(cfg);
    }
    let chart = Chart::new(
        "Grantor load and stranded credit against lease size (production code)",
        "lease size (units)",
        "calls/s, units",
    )
    .line(
        "grantor_calls_per_s",
        "grantor calls per second",
        LineStyle::Solid,
    )
    .line(
        "model_calls_per_s",
        "§9 model: admitted/s ÷ lease size",
        LineStyle::Dashed,
    )
    .line("stranded", "stranded units over the run", LineStyle::Solid);
    let cfg = first.expect("the sweep has points");
    let mut out = report(
        (NAME, opts),
        "Lease size against grantor load and stranded credit (production code)",
        &about(&cfg),
        log,
        (series, chart),
    );
    for p in &points {
        let name = format!("horizon {} ms", p.horizon_ms);
        out.fact(&format!("{name}: lease TTL (ms)"), p.ttl_ms);
        out.fact(&format!("{name}: lease size (units)"), p.lease_size);
        out.fact(&format!("{name}: admitted/s"), p.admitted_per_s);
        out.fact(&format!("{name}: grantor calls/s"), p.calls_per_s);
        out.fact(&format!("{name}: model calls/s"), p.model_calls_per_s);
        out.fact(&format!("{name}: granted per call"), p.granted_per_call);
        out.fact(&format!("{name}: stranded"), p.stranded);
        out.fact(&format!("{name}: agent crashes"), p.crashes);
    }
    Ok(out)
}

fn about(cfg: &NetConfig) -> String {
    format!(
        "The production allocator (one node) and {} production agents on the simulated \
         network offer {} units/s between them, 80 % of R = {} units/s (burst {}). The \
         refresh horizon, in the policy (how much the grantor sizes a lease for) and in the \
         agents (when they ask for more), grows across the sweep, and with it the lease size: \
         one agent's demand over the horizon. Agents report on their leases every half \
         horizon, and leases live four horizons, at least {TTL_MS_MIN} ms. An agent crashes \
         every few seconds and comes back {DOWN_MS} ms later with nothing held; the credit \
         its leases still held is written off when they expire (stranded). The §9 model \
         predicts grantor calls/s ≈ admitted units/s ÷ lease size; the measured calls count \
         every acquire, report and release.",
        cfg.agents,
        cfg.offered_per_s(),
        cfg.rate_per_s,
        cfg.burst,
    )
}
