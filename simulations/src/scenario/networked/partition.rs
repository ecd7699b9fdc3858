//! Partitions under each failure behaviour, on the production code: half the agents lose
//! their allocator for longer than a lease lives, once per failure behaviour. The charged
//! admissions keep the bound under every behaviour; `fail_open` and `restricted` admit
//! uncharged once the lease is gone, counted apart.

use super::{per_step, promises, report, run, run_facts, trailing_second, STEP_MS};
use crate::error::SimError;
use crate::net::{Action, NetConfig, NetReport};
use crate::scenario::{LineStyle, RunOptions, ScenarioReport, Series};
use leasehold_common::policy::FailureMode;

pub const NAME: &str = "net-partition";

const MODES: [(FailureMode, &str); 4] = [
    (FailureMode::FailClosed, "fail_closed"),
    (FailureMode::CachedLease, "cached_lease"),
    (FailureMode::FailOpen, "fail_open"),
    (FailureMode::Restricted, "restricted"),
];

/// The agents cut off, and when (ms).
const CUT_AGENTS: [usize; 2] = [0, 1];

fn config(opts: &RunOptions, failure: FailureMode) -> (NetConfig, u64, u64) {
    let s = opts.scale;
    let (from_ms, until_ms) = (s.pick(5_000, 3_000), s.pick(12_000, 7_000));
    let mut script = Vec::new();
    for agent in CUT_AGENTS {
        script.extend(super::outage(
            from_ms,
            until_ms,
            Action::Partition { agent },
            Action::Repair { agent },
        ));
    }
    // Demand at 80 % of the rate, so that agents hold credit they have not spent yet when
    // they are cut off.
    let cfg = NetConfig {
        agents: 4,
        offer_every_ms: 50,
        duration_ms: s.pick(20_000, 10_000),
        faults: 0,
        failure,
        script,
        ..NetConfig::quick()
    };
    (cfg, from_ms, until_ms)
}

/// Charged admissions of the cut-off agents while they were cut off.
fn cut_admissions(r: &NetReport, from_ms: u64, until_ms: u64) -> usize {
    let span = from_ms * 1_000_000..until_ms * 1_000_000;
    r.admissions
        .iter()
        .filter(|a| CUT_AGENTS.contains(&(a.agent as usize)) && span.contains(&a.at_ns))
        .count()
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let mut log = crate::promises::PromiseLog::default();
    let mut runs = Vec::new();
    for (mode, name) in MODES {
        let (cfg, from_ms, until_ms) = config(opts, mode);
        let r = run(opts, &cfg)?;
        log.merge(&promises(&r, name));
        runs.push((name, cfg, r, from_ms, until_ms));
    }
    let mut cols = vec!["t_ms".to_string()];
    cols.extend(MODES.iter().map(|(_, n)| format!("{n}_1s")));
    cols.extend([
        "fail_open_uncharged_1s".into(),
        "restricted_uncharged_1s".into(),
    ]);
    cols.push("bound_1s".into());
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut series = Series::new(&cols);
    let per: Vec<_> = runs
        .iter()
        .map(|(_, cfg, r, ..)| {
            let (c, u) = per_step(r, cfg.duration_ms);
            (trailing_second(&c), trailing_second(&u))
        })
        .collect();
    let bound = super::bound_1s(&runs[0].1);
    for i in 0..per[0].0.len() {
        let mut row = vec![(i as u64 + 1) * STEP_MS];
        row.extend(per.iter().map(|(c, _)| c[i]));
        row.extend([per[2].1[i], per[3].1[i], bound]);
        series.push(row);
    }
    let mut chart =
        super::per_second_chart("Partitions under each failure behaviour (production code)");
    for (_, n) in MODES {
        chart = chart.line(
            &format!("{n}_1s"),
            &format!("{n} (charged)"),
            LineStyle::Solid,
        );
    }
    chart = chart
        .line(
            "fail_open_uncharged_1s",
            "fail_open uncharged",
            LineStyle::Solid,
        )
        .line(
            "restricted_uncharged_1s",
            "restricted uncharged",
            LineStyle::Solid,
        )
        .line("bound_1s", "B + r·1s", LineStyle::Dashed);
    let (_, cfg0, _, from_ms, until_ms) = &runs[0];
    let about = format!(
        "The production allocator (one node) and four production agents on the simulated \
         network, r = {} units/s, B = {}, leases of {} ms, offered {} units/s. Agents 0 and 1 \
         lose every allocator from {} ms to {} ms, longer than a lease lives; the same seed \
         runs once per failure behaviour. `fail_closed` and `restricted` stop spending held \
         credit at once; `cached_lease` and `fail_open` spend it until the lease runs out; \
         then `fail_open` admits uncharged and `restricted` admits its critical fifth at the \
         local emergency rate ({} units/s per agent), uncharged. Charged admissions are \
         checked against B + r·T over every window; uncharged ones are counted apart.",
        cfg0.rate_per_s,
        cfg0.burst,
        cfg0.lease_ttl_ms,
        cfg0.offered_per_s(),
        from_ms,
        until_ms,
        crate::net::RESTRICTED_RATE_PER_S,
    );
    let mut out = report(
        (NAME, opts),
        "Partitions under each failure behaviour (production code)",
        &about,
        log,
        (series, chart),
    );
    for (name, cfg, r, from_ms, until_ms) in &runs {
        run_facts(&mut out, name, r, cfg);
        out.fact(
            &format!("{name}: charged admissions of the cut-off agents while cut off"),
            cut_admissions(r, *from_ms, *until_ms),
        );
    }
    Ok(out)
}
