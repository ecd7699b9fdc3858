//! Clock steps back at production agents: connected agents' clocks step back by 1.5 to 3 s
//! and by 10 s, and one agent's clock steps back by more than the grantor's write-off grace
//! while it is cut off from its grantor holding credit it has not spent. The same seed runs
//! twice: with only the hosts' wall clocks stepping, as on a real host, whose monotonic
//! clock never goes back; and with the monotonic clock the agents decide by stepping too,
//! which the product does not claim to survive. P3 (nothing admitted past a lease's expiry
//! plus the grace) is checked on the true clock in both.

use super::{per_step, promises, report, run, run_facts, trailing_second, STEP_MS};
use crate::error::SimError;
use crate::net::{Action, Demand, NetConfig, NetReport, Scheduled};
use crate::promises::{Promise, PromiseLog};
use crate::scenario::{LineStyle, RunOptions, ScenarioReport, Series};

pub const NAME: &str = "net-clock-rollback";

/// The agent cut off while its clock is back.
const CUT_AGENT: usize = 0;
/// How far its clock steps back during the cut, in milliseconds: more than the write-off
/// grace (1 s).
const CUT_STEP_MS: i64 = 2_500;
/// Load before and after the cut, and during it, in percent of the full offer: under the
/// rate, so holders hold credit; and lower still during the cut, so the cut-off holder has
/// credit left when its lease runs out.
const LOAD_PCT: u32 = 60;
const CUT_LOAD_PCT: u32 = 20;

/// Leases of 5 s, so that a holder keeps a few seconds of demand in hand and the cut-off
/// holder still has credit when its clock steps back.
const LEASE_TTL_MS: u64 = 5_000;

/// When things happen, in milliseconds, at the run's scale.
struct Plan {
    /// Agents 1, 2 and 3 step back by 1.5, 2 and 3 s, and forward again.
    small_steps: (u64, u64),
    /// Agent 3 steps back by 10 s, and forward again.
    large_step: (u64, u64),
    /// The cut agent is cut off, its clock steps back, and both are undone.
    cut: (u64, u64, u64),
}

fn plan(opts: &RunOptions) -> Plan {
    let t = |full: u64, quick: u64| opts.scale.pick(full, quick);
    Plan {
        small_steps: (t(3_000, 1_500), t(8_000, 3_000)),
        large_step: (t(20_000, 8_000), t(30_000, 11_000)),
        cut: (t(10_000, 3_500), t(10_300, 3_800), t(19_000, 11_000)),
    }
}

fn config(opts: &RunOptions, clock_steps_monotonic: bool) -> NetConfig {
    let p = plan(opts);
    let step = |at_ms, agent, offset_ms| Scheduled {
        at_ms,
        action: Action::ClockOffset { agent, offset_ms },
    };
    let mut script = Vec::new();
    for (agent, back_ms) in [(1, 1_500), (2, 2_000), (3, 3_000)] {
        script.push(step(p.small_steps.0, agent, -back_ms));
        script.push(step(p.small_steps.1, agent, 0));
    }
    script.push(step(p.large_step.0, 3, -10_000));
    script.push(step(p.large_step.1, 3, 0));
    let (cut_from, cut_step, cut_until) = p.cut;
    let agent = CUT_AGENT;
    script.push(Scheduled {
        at_ms: cut_from,
        action: Action::Partition { agent },
    });
    script.push(step(cut_step, agent, -CUT_STEP_MS));
    script.push(Scheduled {
        at_ms: cut_until,
        action: Action::Repair { agent },
    });
    script.push(step(cut_until, agent, 0));
    script.sort_by_key(|s| s.at_ms);
    NetConfig {
        agents: 4,
        duration_ms: opts.scale.pick(34_000, 12_000),
        faults: 0,
        rate_per_s: 400,
        burst: 1_000,
        lease_ttl_ms: LEASE_TTL_MS,
        refresh_horizon_ms: 2_000,
        offer_every_ms: 10,
        offer_per_round: 1,
        clock_steps_monotonic,
        demand: Demand::Load {
            steps: vec![
                (0, LOAD_PCT),
                (cut_from, CUT_LOAD_PCT),
                (cut_until, LOAD_PCT),
            ],
        },
        script,
        ..NetConfig::quick()
    }
}

/// Admissions of `agent` in `[from_ms, until_ms)`.
fn admitted_by(r: &NetReport, agent: usize, from_ms: u64, until_ms: u64) -> usize {
    let span = from_ms * 1_000_000..until_ms * 1_000_000;
    r.admissions
        .iter()
        .filter(|a| a.agent as usize == agent && span.contains(&a.at_ns))
        .count()
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let wall = config(opts, false);
    let both = config(opts, true);
    let (rw, rb) = (run(opts, &wall)?, run(opts, &both)?);
    // The product's fault model: only wall clocks step. Its promises are the scenario's.
    let log = promises(&rw, "wall clocks step");
    let stepped = promises(&rb, "monotonic clocks step too");
    let series = series(&[(&wall, &rw), (&both, &rb)]);
    let chart = super::per_second_chart("Agent clocks stepping back (production code)")
        .line("wall_1s", "wall clocks step", LineStyle::Solid)
        .line(
            "monotonic_1s",
            "monotonic clocks step too",
            LineStyle::Solid,
        )
        .line("bound_1s", "B + r·1s", LineStyle::Dashed);
    let p = plan(opts);
    let about = format!(
        "The production allocator (one node) and four production agents, r = {} units/s, \
         B = {}, leases of {} ms, a refresh horizon of {} ms, demand {}% of {} units/s. Agents \
         1, 2 and 3's clocks step back by 1.5, 2 and 3 s at {} ms and forward again at {} ms; \
         agent 3's by 10 s at {} ms until {} ms. Agent {} is cut off from its grantor at {} ms, \
         while demand drops to {}% so it holds credit it does not spend, and its clock steps \
         back by {} ms (more than the 1 s write-off grace) at {} ms; both end at {} ms. The \
         seed runs twice. First with only the hosts' wall clocks stepping: on a real host \
         the agent decides by `std::time::Instant`, which never goes back, so this is the \
         product's fault model, and its promises are this scenario's. Then with the agents' \
         monotonic clocks stepping too: the engine clamps a reading behind its last one, so \
         its time stalls through the step and a lease's deadline, measured on that clock, \
         comes later in true time by up to the step. The facts report P3 (no charged \
         admission past every lease version's arrival + TTL + 1 s grace, on the true clock) \
         and P1 for that run as findings, with the clock readings each engine clamped.",
        wall.rate_per_s,
        wall.burst,
        wall.lease_ttl_ms,
        wall.refresh_horizon_ms,
        LOAD_PCT,
        wall.offered_per_s(),
        p.small_steps.0,
        p.small_steps.1,
        p.large_step.0,
        p.large_step.1,
        CUT_AGENT,
        p.cut.0,
        CUT_LOAD_PCT,
        CUT_STEP_MS,
        p.cut.1,
        p.cut.2,
    );
    let mut out = report(
        (NAME, opts),
        "Agent clocks stepping back (production code)",
        &about,
        log,
        (series, chart),
    );
    for (label, cfg, r) in [
        ("wall clocks step", &wall, &rw),
        ("monotonic too", &both, &rb),
    ] {
        run_facts(&mut out, label, r, cfg);
        run_clock_facts(&mut out, label, r, &p);
    }
    finding_facts(&mut out, &rb, &stepped);
    Ok(out)
}

/// What broke when the monotonic clocks stepped too: outside the product's fault model, so
/// reported as findings rather than as the scenario's promises.
fn finding_facts(out: &mut ScenarioReport, r: &NetReport, stepped: &PromiseLog) {
    let p = "monotonic too (finding)";
    out.fact(&format!("{p}: P1 windows over B + r·T"), r.bound.violations);
    out.fact(
        &format!("{p}: P2 violations"),
        stepped.count(Promise::NoDoubleSpend),
    );
    out.fact(
        &format!("{p}: P3 admissions past expiry + grace"),
        r.expiry.violations,
    );
    if let Some((agent, at_ns, late_ns)) = r.expiry.first.first() {
        out.fact(
            &format!("{p}: first past expiry + grace"),
            format!(
                "agent {agent} at {} ms, {} ms past its lease's expiry",
                at_ns / 1_000_000,
                late_ns / 1_000_000
            ),
        );
    }
}

/// A run's P3 check, the engines' clamped readings, and the admissions of the stepped
/// agents while their clocks were back.
fn run_clock_facts(out: &mut ScenarioReport, label: &str, r: &NetReport, p: &Plan) {
    out.fact(&format!("{label}: P3 admissions checked"), r.expiry.checked);
    out.fact(
        &format!("{label}: admissions past expiry + grace"),
        r.expiry.violations,
    );
    for (agent, c) in r.clock_rollbacks.iter().enumerate() {
        out.fact(
            &format!("{label}: agent {agent} engine readings clamped (steps back)"),
            c.rollbacks,
        );
    }
    let (cut_from, _, cut_until) = p.cut;
    out.fact(
        &format!("{label}: agent {CUT_AGENT} admitted while cut off"),
        admitted_by(r, CUT_AGENT, cut_from, cut_until),
    );
    for agent in 1..4 {
        out.fact(
            &format!("{label}: agent {agent} admitted while back 1.5-3 s"),
            admitted_by(r, agent, p.small_steps.0, p.small_steps.1),
        );
    }
    out.fact(
        &format!("{label}: agent 3 admitted while back 10 s"),
        admitted_by(r, 3, p.large_step.0, p.large_step.1),
    );
    out.fact(
        &format!("{label}: agent 2 (never back then) admitted meanwhile"),
        admitted_by(r, 2, p.large_step.0, p.large_step.1),
    );
}

/// Both runs' trailing-second admissions, with the one-second bound.
fn series(runs: &[(&NetConfig, &NetReport); 2]) -> Series {
    let per: Vec<Vec<u64>> = runs
        .iter()
        .map(|(cfg, r)| trailing_second(&per_step(r, cfg.duration_ms).0))
        .collect();
    let bound = super::bound_1s(runs[0].0);
    let mut series = Series::new(&["t_ms", "wall_1s", "monotonic_1s", "bound_1s"]);
    for (i, (w, m)) in per[0].iter().zip(&per[1]).enumerate() {
        series.push(vec![(i as u64 + 1) * STEP_MS, *w, *m, bound]);
    }
    series
}
