//! The pattern text's §8 trace on the production code: a tenant's steady traffic spreads
//! over more gateway instances as they scale up. Beside the leased run, the same offers go
//! through a process-local token bucket per instance (each its own `R` and `B`), worked out
//! offline: those admit about N×R, the leased agents stay within `B + R·T`.

use super::{
    count_per_step, each_round, promises, report, run, run_facts, trailing_second, STEP_MS,
};
use crate::error::SimError;
use crate::net::{check_admissions, Admission, Demand, NetConfig, NetReport};
use crate::scenario::{LineStyle, RunOptions, ScenarioReport, Series};
use leasehold_common::algo::TokenBucket;
use leasehold_common::time::Nanos;

pub const NAME: &str = "net-autoscaling";

/// Offered load as a multiple of the tenant's rate.
const LOAD_FACTOR: u64 = 15;

/// The run, and its instance counts with the instant each starts (ms).
fn config(opts: &RunOptions) -> NetConfig {
    let s = opts.scale;
    let agents = s.pick(12, 6);
    let steps = s.pick(
        vec![(0, 4), (15_000, 8), (25_000, 12)],
        vec![(0, 2), (4_000, 4), (7_000, 6)],
    );
    let base = NetConfig::quick();
    // Every round the agents together offer `agents` requests; pick the round so that
    // they offer LOAD_FACTOR × R in all.
    let offer_every_ms = agents as u64 * 1_000 / (LOAD_FACTOR * base.rate_per_s);
    NetConfig {
        agents,
        duration_ms: s.pick(35_000, 10_000),
        faults: 0,
        offer_every_ms: offer_every_ms.max(1),
        demand: Demand::Scaled { steps },
        ..base
    }
}

/// What a process-local token bucket `(R, B)` per instance admits of the same offers: each
/// agent's offers round by round, as its host works them out, against its own bucket,
/// full when the instance first takes traffic.
pub fn local_buckets(seed: u64, cfg: &NetConfig) -> Vec<Admission> {
    let mut buckets: Vec<Option<TokenBucket>> = vec![None; cfg.agents];
    let mut out = Vec::new();
    each_round(seed, cfg, |agent, at_ms, n| {
        if n == 0 {
            return;
        }
        let now = Nanos(at_ms * 1_000_000);
        let b = buckets[agent].get_or_insert_with(|| TokenBucket::full(cfg.rate(), cfg.burst, now));
        b.refill(now);
        let take = n.min(b.tokens());
        b.take_exact(take);
        let a = Admission {
            at_ns: now.0,
            agent: agent as u32,
        };
        out.extend(std::iter::repeat_n(a, take as usize));
    });
    out.sort_unstable();
    out
}

/// Units admitted per second on average over `[from_ms + 1 s, until_ms)`: each phase
/// without its first second, while new instances take their first leases.
fn phase_rate(per_step: &[u64], from_ms: u64, until_ms: u64) -> u64 {
    let from = ((from_ms + 1_000) / STEP_MS) as usize;
    let until = ((until_ms / STEP_MS) as usize).min(per_step.len());
    if from >= until {
        return 0;
    }
    let sum: u64 = per_step[from..until].iter().sum();
    sum * 1_000 / ((until - from) as u64 * STEP_MS)
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let cfg = config(opts);
    let r = run(opts, &cfg)?;
    let log = promises(&r, "leased");
    let local = local_buckets(opts.seed, &cfg);
    let leased_steps = count_per_step(&r.admissions, cfg.duration_ms);
    let local_steps = count_per_step(&local, cfg.duration_ms);
    let (leased_1s, local_1s) = (
        trailing_second(&leased_steps),
        trailing_second(&local_steps),
    );
    let bound = super::bound_1s(&cfg);
    let mut series = Series::new(&["t_ms", "leased_1s", "local_1s", "bound_1s", "instances_x_r"]);
    for i in 0..leased_steps.len() {
        let t_ms = (i as u64 + 1) * STEP_MS;
        let active = cfg.demand.active_at(t_ms - 1, cfg.agents) as u64;
        series.push(vec![
            t_ms,
            leased_1s[i],
            local_1s[i],
            bound,
            active * cfg.rate_per_s,
        ]);
    }
    let chart = super::per_second_chart("Admitted per second as instances scale (production code)")
        .line("local_1s", "process-local buckets", LineStyle::Solid)
        .line("leased_1s", "leased credit", LineStyle::Solid)
        .line("bound_1s", "B + R·1s", LineStyle::Dashed)
        .line("instances_x_r", "instances × R", LineStyle::Dashed);
    let mut out = report(
        (NAME, opts),
        "Autoscaling multiplies a process-local limit (production code)",
        &about(&cfg),
        log,
        (series, chart),
    );
    facts(&mut out, &cfg, &r, &local, (&leased_steps, &local_steps));
    Ok(out)
}

fn about(cfg: &NetConfig) -> String {
    let Demand::Scaled { steps } = &cfg.demand else {
        unreachable!("the scenario's demand is scaled")
    };
    let counts: Vec<String> = steps.iter().map(|(_, n)| n.to_string()).collect();
    format!(
        "The production allocator (one node) and up to {} production agents on the simulated \
         network. A tenant limited to R = {} units/s (burst {}) offers {} units/s ({}R), spread \
         evenly over the gateway instances taking traffic, which scale {}. The same offers, \
         agent by agent, also go through a process-local token bucket per instance (R, B), \
         worked out offline: those admit about N×R. The leased agents share one bucket and \
         stay within B + R·T over every window, however many instances there are.",
        cfg.agents,
        cfg.rate_per_s,
        cfg.burst,
        cfg.offered_per_s(),
        LOAD_FACTOR,
        counts.join(" → "),
    )
}

fn facts(
    out: &mut ScenarioReport,
    cfg: &NetConfig,
    r: &NetReport,
    local: &[Admission],
    (leased_steps, local_steps): (&[u64], &[u64]),
) {
    let Demand::Scaled { steps } = &cfg.demand else {
        return;
    };
    run_facts(out, "leased", r, cfg);
    let local_check = check_admissions(local, cfg.rate(), cfg.burst);
    let peak = |steps: &[u64]| trailing_second(steps).into_iter().max().unwrap_or(0);
    out.fact("rate R (units/s)", cfg.rate_per_s);
    out.fact("bound for 1 s (B + R)", super::bound_1s(cfg));
    out.fact("leased: peak units in 1 s", peak(leased_steps));
    out.fact("local buckets: admitted", local.len());
    out.fact("local buckets: peak units in 1 s", peak(local_steps));
    out.fact(
        "local buckets: windows over B + R·T",
        local_check.violations,
    );
    out.fact(
        "local buckets: worst excess (units)",
        local_check.worst_excess,
    );
    for (i, &(from_ms, active)) in steps.iter().enumerate() {
        let until_ms = steps.get(i + 1).map_or(cfg.duration_ms, |s| s.0);
        let name = format!("{active} instances");
        out.fact(
            &format!("{name}: leased units/s"),
            phase_rate(leased_steps, from_ms, until_ms),
        );
        out.fact(
            &format!("{name}: local buckets units/s"),
            phase_rate(local_steps, from_ms, until_ms),
        );
        out.fact(
            &format!("{name}: leased agents admitting"),
            agents_admitting(&r.admissions, from_ms + 1_000, until_ms),
        );
    }
}

/// How many agents admitted anything in `[from_ms, until_ms)`: whether leased credit
/// reached every instance taking traffic.
fn agents_admitting(log: &[Admission], from_ms: u64, until_ms: u64) -> usize {
    let span = from_ms * 1_000_000..until_ms * 1_000_000;
    let mut agents: Vec<u32> = log
        .iter()
        .filter(|a| span.contains(&a.at_ns))
        .map(|a| a.agent)
        .collect();
    agents.sort_unstable();
    agents.dedup();
    agents.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_buckets_admit_their_burst_then_their_rate_each() {
        let cfg = NetConfig {
            agents: 2,
            duration_ms: 3_000,
            offer_every_ms: 10,
            offer_per_round: 5,
            demand: Demand::Scaled {
                steps: vec![(0, 1), (2_000, 2)],
            },
            ..NetConfig::quick()
        };
        let log = local_buckets(1, &cfg);
        let by = |agent: u32| log.iter().filter(|a| a.agent == agent).count() as u64;
        // Agent 0 alone for 3 s: B + 3R, less what refills after the last round.
        assert!(
            (cfg.burst + 3 * 100 - 1..=cfg.burst + 3 * 100).contains(&by(0)),
            "{}",
            by(0)
        );
        // Agent 1 from 2 s: its own burst and rate on top.
        assert!(
            (cfg.burst + 100 - 1..=cfg.burst + 100).contains(&by(1)),
            "{}",
            by(1)
        );
        assert!(check_admissions(&log, cfg.rate(), cfg.burst).violations > 0);
    }
}
