//! Named scenarios on the networked simulation: the production allocator and agent code on
//! turmoil's simulated network ([`crate::net`]), with a scripted fault schedule instead of
//! (or besides) one drawn from the seed.
//!
//! Each scenario runs [`crate::net::run`] one or more times and turns its reports into a
//! [`ScenarioReport`]: the promises checked on every run ([`promises`]), a time series in
//! 100 ms steps ([`series`]), headline figures and a chart.

pub mod autoscaling;
pub mod clock_rollback;
pub mod crash;
pub mod key_spray;
pub mod leader_loss;
pub mod lease_size;
pub mod partition;
pub mod rollout;
mod window_figures;
pub mod windows;
pub mod zipf;

use super::{RunOptions, ScenarioReport, Series};
use crate::error::SimError;
use crate::net::demand::Offers;
use crate::net::{self, Action, NetConfig, NetReport, Scheduled};
use crate::promises::{Promise, PromiseLog};

/// One row of a networked scenario's series covers this much simulated time.
pub const STEP_MS: u64 = 100;
/// The trailing window the series' per-second columns sum over.
const SECOND_MS: u64 = 1_000;

/// Runs `cfg` under the scenario's seed.
pub fn run(opts: &RunOptions, cfg: &NetConfig) -> Result<NetReport, SimError> {
    Ok(net::run(opts.seed, cfg)?)
}

/// The promises one run kept and broke, each violation labelled with `label` (which run of
/// the scenario it was).
pub fn promises(r: &NetReport, label: &str) -> PromiseLog {
    let mut log = PromiseLog::default();
    let end_ns = r.admissions.last().map_or(0, |a| a.at_ns);
    if r.bound.violations > 0 {
        let at = r.admissions.get(r.bound.worst_start).map_or(0, |a| a.at_ns);
        let over = match r.windows {
            Some(_) => "windows (or sliding intervals) over their limit",
            None => "windows over B + r·T",
        };
        log.record(Promise::BudgetBound, at, || {
            format!(
                "{label}: {} {over}, worst by {} units",
                r.bound.violations, r.bound.worst_excess
            )
        });
    }
    if !r.ledger_conserved {
        log.record(Promise::NoDoubleSpend, end_ns, || {
            format!("{label}: a ledger's units no longer add up")
        });
    }
    for s in r.settlements.iter().filter(|s| !s.holds()) {
        log.record(Promise::NoDoubleSpend, s.crash_at_ms * 1_000_000, || {
            format!(
                "{label}: agent {} admitted {} under leases settled as {} spent",
                s.agent,
                s.admitted,
                s.charged()
            )
        });
    }
    for &(agent, at_ns, late_ns) in &r.expiry.first {
        log.record(Promise::LeaseExpiry, at_ns, || {
            format!(
                "{label}: agent {agent} admitted {} ms past its lease's expiry",
                late_ns / 1_000_000
            )
        });
    }
    if let Some(g) = r
        .grantor
        .as_ref()
        .filter(|g| !g.within_caps() || r.grantor_keys_peak > g.keys_max)
    {
        log.record(Promise::BoundedState, end_ns, || {
            format!(
                "{label}: grantor held {} keys at most (max {}), {} leases at the end (max {})",
                r.grantor_keys_peak.max(g.keys),
                g.keys_max,
                g.leases,
                g.leases_max
            )
        });
    }
    for m in &r.miscounts {
        log.record(Promise::HonestAccounting, end_ns, || {
            format!(
                "{label}: agent {} (start {}) counted {:?}, its traffic saw {:?}",
                m.agent, m.start, m.engine, m.seen
            )
        });
    }
    log
}

/// Charged and uncharged admissions of `r`, per step of [`STEP_MS`].
pub fn per_step(r: &NetReport, duration_ms: u64) -> (Vec<u64>, Vec<u64>) {
    (
        count_per_step(&r.admissions, duration_ms),
        count_per_step(&r.uncharged, duration_ms),
    )
}

/// Admissions of `log` per step of [`STEP_MS`], over `duration_ms`.
pub fn count_per_step(log: &[net::Admission], duration_ms: u64) -> Vec<u64> {
    let steps = duration_ms.div_ceil(STEP_MS) as usize;
    let mut out = vec![0u64; steps];
    for a in log {
        let i = (a.at_ns / 1_000_000 / STEP_MS) as usize;
        if let Some(n) = out.get_mut(i) {
            *n += 1;
        }
    }
    out
}

/// Replays every agent's offers round by round, as its host works them out (a round every
/// `offer_every_ms` from the start), calling `f(agent, at_ms, requests)`: figures computed
/// beside a run of `cfg` under `seed` see the same offers it did.
pub fn each_round(seed: u64, cfg: &NetConfig, mut f: impl FnMut(usize, u64, u64)) {
    for agent in 0..cfg.agents {
        let mut offers = Offers::new(seed, agent, cfg.agents, cfg.offer_per_round);
        let mut at_ms = 0;
        while at_ms < cfg.duration_ms {
            f(agent, at_ms, offers.next(&cfg.demand, at_ms));
            at_ms += cfg.offer_every_ms.max(1);
        }
    }
}

/// Sums over the trailing second ending at each step (the step included).
pub fn trailing_second(per_step: &[u64]) -> Vec<u64> {
    let w = (SECOND_MS / STEP_MS) as usize;
    let mut out = Vec::with_capacity(per_step.len());
    let mut sum = 0u64;
    for (i, n) in per_step.iter().enumerate() {
        sum += n;
        if i >= w {
            sum -= per_step[i - w];
        }
        out.push(sum);
    }
    out
}

/// A chart over simulated time of units admitted over the trailing second.
pub fn per_second_chart(title: &str) -> super::Chart {
    super::Chart::new(
        title,
        "simulated time (ms)",
        "units admitted in the last second",
    )
}

/// A fault at `at_ms` and its repair at `until_ms`, for a scenario's script.
pub fn outage(at_ms: u64, until_ms: u64, fault: Action, repair: Action) -> [Scheduled; 2] {
    [
        Scheduled {
            at_ms,
            action: fault,
        },
        Scheduled {
            at_ms: until_ms,
            action: repair,
        },
    ]
}

/// `B + r·1s` of `cfg`'s policy: the most any one-second window may admit.
pub fn bound_1s(cfg: &NetConfig) -> u64 {
    cfg.burst + cfg.rate().units_in(SECOND_MS * 1_000_000)
}

/// The standard series of one run: time, charged and uncharged admissions over the
/// trailing second, and the one-second bound.
pub fn standard_series(r: &NetReport, cfg: &NetConfig) -> Series {
    let (charged, uncharged) = per_step(r, cfg.duration_ms);
    let (c1, u1) = (trailing_second(&charged), trailing_second(&uncharged));
    let mut series = Series::new(&["t_ms", "admitted_1s", "uncharged_1s", "bound_1s"]);
    for i in 0..charged.len() {
        series.push(vec![(i as u64 + 1) * STEP_MS, c1[i], u1[i], bound_1s(cfg)]);
    }
    series
}

/// A report checking every promise, with `promises` merged from the scenario's runs.
pub fn report(
    (scenario, opts): (&str, &RunOptions),
    title: &str,
    about: &str,
    promises: PromiseLog,
    (series, chart): (Series, super::Chart),
) -> ScenarioReport {
    ScenarioReport {
        scenario: scenario.into(),
        seed: opts.seed,
        title: title.into(),
        about: about.into(),
        checked: Promise::ALL.to_vec(),
        promises,
        facts: Vec::new(),
        series,
        chart,
    }
}

/// Facts every networked scenario reports for a run, prefixed with `label`.
pub fn run_facts(report: &mut ScenarioReport, label: &str, r: &NetReport, cfg: &NetConfig) {
    let bound = cfg.burst + cfg.rate().units_in(cfg.duration_ms * 1_000_000);
    let p = |name: &str| {
        if label.is_empty() {
            name.to_string()
        } else {
            format!("{label}: {name}")
        }
    };
    report.fact(&p("offered"), r.offered);
    report.fact(&p("admitted (charged)"), r.admissions.len());
    report.fact(&p("admitted uncharged"), r.uncharged.len());
    report.fact(&p("B + r·T over the run"), bound);
    report.fact(&p("windows checked"), r.bound.windows);
    if let Some(g) = &r.grantor {
        report.fact(&p("stranded (written off at expiry)"), g.figures.stranded);
    }
    report.fact(&p("grantor calls"), r.grantor_calls);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trailing_second_sums_ten_steps() {
        let steps = vec![1u64; 25];
        let t = trailing_second(&steps);
        assert_eq!(t[0], 1);
        assert_eq!(t[9], 10);
        assert_eq!(t[24], 10);
    }
}
