//! Zipf-skewed demand over many production agents whose hot spots move: how much of the
//! bound the leased agents put to use, and whether credit follows the demand to wherever
//! the hot spots are this epoch.

use super::STEP_MS;
use super::{count_per_step, each_round, promises, report, run, run_facts, trailing_second};
use crate::error::SimError;
use crate::net::{Admission, Demand, NetConfig, NetReport};
use crate::scenario::{Chart, LineStyle, RunOptions, ScenarioReport, Series};

pub const NAME: &str = "net-zipf";

/// Zipf exponent, in thousandths.
const EXPONENT_MILLI: u32 = 1_100;
/// Offered load, in percent of the rate.
const LOAD_PCT: u64 = 150;
/// The hottest agents of an epoch, in percent of the agents (at least one).
const HOT_PCT: usize = 10;

fn config(opts: &RunOptions) -> NetConfig {
    let s = opts.scale;
    let base = NetConfig {
        agents: s.pick(120, 12),
        // 120 agents for 30 s take over three minutes in a release build; 15 s, under two.
        duration_ms: s.pick(15_000, 10_000),
        faults: 0,
        offer_every_ms: 20,
        offer_per_round: 1,
        demand: Demand::Zipf {
            exponent_milli: EXPONENT_MILLI,
            reshuffle_ms: 3_000,
        },
        ..NetConfig::quick()
    };
    let rate_per_s = base.offered_per_s() * 100 / LOAD_PCT;
    NetConfig {
        rate_per_s,
        burst: 2 * rate_per_s,
        ..base
    }
}

fn reshuffle_ms(cfg: &NetConfig) -> u64 {
    match cfg.demand {
        Demand::Zipf { reshuffle_ms, .. } => reshuffle_ms,
        _ => cfg.duration_ms,
    }
}

/// The hottest [`HOT_PCT`] of the agents in each hot-spot epoch.
fn hot_sets(seed: u64, cfg: &NetConfig) -> Vec<Vec<u32>> {
    let every_ms = reshuffle_ms(cfg);
    let hot_n = (cfg.agents * HOT_PCT / 100).max(1);
    (0..cfg.duration_ms.div_ceil(every_ms))
        .map(|epoch| {
            let at_ms = epoch * every_ms;
            let mut by_share: Vec<(u64, u32)> = (0..cfg.agents)
                .map(|a| (cfg.demand.share_ppm(seed, a, cfg.agents, at_ms), a as u32))
                .collect();
            by_share.sort_unstable_by(|x, y| y.cmp(x));
            by_share.iter().take(hot_n).map(|&(_, a)| a).collect()
        })
        .collect()
}

/// Per epoch: (offered, offered by its hottest, admitted, admitted by its hottest).
fn epoch_shares(seed: u64, cfg: &NetConfig, r: &NetReport, hot: &[Vec<u32>]) -> Vec<[u64; 4]> {
    let every_ms = reshuffle_ms(cfg);
    let mut out = vec![[0u64; 4]; hot.len()];
    let is_hot = |epoch: usize, agent: u32| hot[epoch].contains(&agent);
    each_round(seed, cfg, |agent, at_ms, n| {
        let e = (at_ms / every_ms) as usize;
        out[e][0] += n;
        if is_hot(e, agent as u32) {
            out[e][1] += n;
        }
    });
    for a in &r.admissions {
        let e = ((a.at_ns / 1_000_000 / every_ms) as usize).min(hot.len() - 1);
        out[e][2] += 1;
        if is_hot(e, a.agent) {
            out[e][3] += 1;
        }
    }
    out
}

/// Offers of every agent per step, as the hosts work them out.
fn offered_per_step(seed: u64, cfg: &NetConfig) -> Vec<u64> {
    let mut out = vec![0u64; cfg.duration_ms.div_ceil(STEP_MS) as usize];
    each_round(seed, cfg, |_, at_ms, n| {
        out[(at_ms / STEP_MS) as usize] += n
    });
    out
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let cfg = config(opts);
    let r = run(opts, &cfg)?;
    let log = promises(&r, "zipf");
    let hot = hot_sets(opts.seed, &cfg);
    let every_ms = reshuffle_ms(&cfg);
    let hot_log: Vec<Admission> = r
        .admissions
        .iter()
        .filter(|a| {
            let e = ((a.at_ns / 1_000_000 / every_ms) as usize).min(hot.len() - 1);
            hot[e].contains(&a.agent)
        })
        .copied()
        .collect();
    let offered = trailing_second(&offered_per_step(opts.seed, &cfg));
    let admitted = trailing_second(&count_per_step(&r.admissions, cfg.duration_ms));
    let hot_1s = trailing_second(&count_per_step(&hot_log, cfg.duration_ms));
    let bound = super::bound_1s(&cfg);
    let mut series = Series::new(&[
        "t_ms",
        "offered_1s",
        "admitted_1s",
        "hot_admitted_1s",
        "bound_1s",
    ]);
    for i in 0..admitted.len() {
        let t_ms = (i as u64 + 1) * STEP_MS;
        series.push(vec![t_ms, offered[i], admitted[i], hot_1s[i], bound]);
    }
    let chart = Chart::new(
        "Offered and admitted per second, Zipf demand (production code)",
        "simulated time (ms)",
        "units in the last second",
    )
    .line("offered_1s", "offered", LineStyle::Solid)
    .line("admitted_1s", "admitted", LineStyle::Solid)
    .line(
        "hot_admitted_1s",
        "admitted by the epoch's hottest 10%",
        LineStyle::Solid,
    )
    .line("bound_1s", "B + R·1s", LineStyle::Dashed);
    let mut out = report(
        (NAME, opts),
        "Zipf demand over many agents with moving hot spots (production code)",
        &about(&cfg),
        log,
        (series, chart),
    );
    facts(&mut out, &cfg, &r, &epoch_shares(opts.seed, &cfg, &r, &hot));
    Ok(out)
}

fn about(cfg: &NetConfig) -> String {
    format!(
        "The production allocator (one node) and {} production agents on the simulated \
         network. A tenant limited to R = {} units/s (burst {}) offers {} units/s ({LOAD_PCT}% of \
         R), shared among the agents by Zipf's law (exponent {}), so a few agents carry most of \
         it; every {} ms the ranking is drawn afresh and the hot spots move. Utilisation is \
         the charged admissions over B + R·T for the run. Per epoch, the share of the \
         admissions that went to the epoch's hottest {HOT_PCT}% of agents is set beside their \
         share of the offers: leases follow each holder's measured demand, so idle credit ends \
         up where the demand is.",
        cfg.agents,
        cfg.rate_per_s,
        cfg.burst,
        cfg.offered_per_s(),
        f64::from(EXPONENT_MILLI) / 1_000.0,
        reshuffle_ms(cfg),
    )
}

fn facts(out: &mut ScenarioReport, cfg: &NetConfig, r: &NetReport, epochs: &[[u64; 4]]) {
    run_facts(out, "", r, cfg);
    let bound = r.admitted_max;
    let admitted = r.admissions.len() as u64;
    out.fact("agents", cfg.agents);
    out.fact(
        "utilisation of the bound (%)",
        admitted * 100 / bound.max(1),
    );
    out.fact(
        "admitted of what the bound could serve (%)",
        admitted * 100 / r.offered.min(bound).max(1),
    );
    out.fact(
        "hottest agents per epoch",
        (cfg.agents * HOT_PCT / 100).max(1),
    );
    let every_ms = reshuffle_ms(cfg);
    for (i, [offered, hot_offered, admitted, hot_admitted]) in epochs.iter().enumerate() {
        let from_ms = i as u64 * every_ms;
        let until_ms = (from_ms + every_ms).min(cfg.duration_ms);
        let name = format!("epoch {i} ({from_ms}–{until_ms} ms)");
        out.fact(
            &format!("{name}: hottest share of offers (%)"),
            hot_offered * 100 / offered.max(&1),
        );
        out.fact(
            &format!("{name}: hottest share of admissions (%)"),
            hot_admitted * 100 / admitted.max(&1),
        );
    }
}
