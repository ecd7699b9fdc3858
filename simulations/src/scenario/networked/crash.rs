//! Enforcer crashes on the production agent: agents crash while holding credit they have not
//! spent, and right after spending all they held, and restart; once with state files on their
//! disks and once without. The grantor settles each crashed run's leases either at the mark
//! its successor releases them at (from the state file) or by writing them off at expiry as
//! stranded; either way it never counts less spent than the run admitted (P2 across the
//! crash), so no credit is granted twice.

use super::{promises, report, run, run_facts, standard_series};
use crate::error::SimError;
use crate::net::{Action, Demand, NetConfig, NetReport, Settlement};
use crate::promises::PromiseLog;
use crate::scenario::{LineStyle, RunOptions, ScenarioReport, Series};

pub const NAME: &str = "net-crash";

/// Load while holders spend credit as fast as it comes (four times the rate), and while
/// they hold more than they spend (well under the rate), in percent of the full offer.
const LOAD_HIGH_PCT: u32 = 100;
const LOAD_LOW_PCT: u32 = 15;
/// How long a crashed agent stays down: less than a lease lives, so that a restart from a
/// state file finds its previous run's leases still on the books.
const DOWN_MS: u64 = 600;
/// Leases of 3 s, so that a holder at low load keeps some credit in hand between renewals.
const LEASE_TTL_MS: u64 = 3_000;
/// Time left after the last crash for its leases to be written off (ttl plus the grace).
const SETTLE_MS: u64 = LEASE_TTL_MS + 2_000;

/// The demand phases and the crashes: one crash near the end of each phase, by turns in
/// a high-load and a low-load phase, each at the next agent.
fn config(opts: &RunOptions, agent_state: bool) -> NetConfig {
    let s = opts.scale;
    let duration_ms = s.pick(30_000, 12_000);
    let phase_ms = s.pick(3_000, 2_000);
    let phases = (duration_ms - 1_000) / phase_ms;
    let crash_at = |p: u64| (p + 1) * phase_ms - DOWN_MS - 300;
    let mut steps = Vec::new();
    let mut script = Vec::new();
    for p in 0..phases {
        let load = if p % 2 == 0 {
            LOAD_HIGH_PCT
        } else {
            LOAD_LOW_PCT
        };
        steps.push((p * phase_ms, load));
        let (agent, at_ms) = ((p % 4) as usize, crash_at(p));
        if at_ms + SETTLE_MS > duration_ms {
            continue;
        }
        script.extend(super::outage(
            at_ms,
            at_ms + DOWN_MS,
            Action::Crash { agent },
            Action::Restart { agent },
        ));
    }
    NetConfig {
        agents: 4,
        duration_ms,
        faults: 0,
        lease_ttl_ms: LEASE_TTL_MS,
        refresh_horizon_ms: 1_000,
        offer_every_ms: 10,
        offer_per_round: 1,
        agent_state,
        demand: Demand::Load { steps },
        script,
        ..NetConfig::quick()
    }
}

/// The load in force at `at_ms`, in percent.
fn load_at(cfg: &NetConfig, at_ms: u64) -> u32 {
    match &cfg.demand {
        Demand::Load { steps } => steps
            .iter()
            .rev()
            .find(|(from, _)| *from <= at_ms)
            .map_or(100, |(_, pct)| *pct),
        _ => 100,
    }
}

/// Unspent credit at a crash up to which the crash counts as right after spending all the
/// agent held: the admission log stamps a round of offers at its start, so a unit spent in
/// the crash's own step may show as unspent.
const SPENT_SLACK_UNITS: u64 = 1;

/// Crashes of `r` that caught their agent holding unspent credit.
pub fn with_unspent(r: &NetReport) -> usize {
    r.settlements
        .iter()
        .filter(|s| s.unspent_at_crash() > SPENT_SLACK_UNITS)
        .count()
}

/// Crashes of `r` right after the agent spent all it held.
pub fn all_spent(r: &NetReport) -> usize {
    r.settlements
        .iter()
        .filter(|s| s.leases > 0 && s.unspent_at_crash() <= SPENT_SLACK_UNITS)
        .count()
}

/// Credit the grantor counts spent under the crashed runs' leases beyond what the runs
/// admitted: released above use (the mark runs ahead of spending) or written off whole.
pub fn counted_beyond_admitted(r: &NetReport) -> u64 {
    r.settlements
        .iter()
        .map(|s| s.charged().saturating_sub(s.admitted))
        .sum()
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let mut log = PromiseLog::default();
    let mut runs = Vec::new();
    for (agent_state, label) in [(true, "state files"), (false, "no state files")] {
        let cfg = config(opts, agent_state);
        let r = run(opts, &cfg)?;
        log.merge(&promises(&r, label));
        runs.push((label, cfg, r));
    }
    let series = both_series(&runs);
    let chart =
        super::per_second_chart("Agent crashes with and without state files (production code)")
            .line("state_files_1s", "with state files", LineStyle::Solid)
            .line("no_state_files_1s", "without state files", LineStyle::Solid)
            .line("bound_1s", "B + r·1s", LineStyle::Dashed);
    let cfg0 = &runs[0].1;
    let about = format!(
        "The production allocator (one node) and four production agents, r = {} units/s, \
         B = {}, leases of {} ms, a refresh horizon of {} ms. Demand alternates between {}% \
         of a full offer of {} units/s (holders spend credit as it arrives) and {}% (holders \
         hold more than they spend). Near the end of each phase the next agent crashes and \
         restarts {} ms later, so crashes alternate between the two loads. The same seed runs \
         with agent state files (the restarted agent releases its previous run's leases at \
         their durable marks) and without (the grantor writes them off at expiry, counting \
         their whole credit spent, as stranded). Per crash the facts give the credit the \
         crashed run's leases held at the crash, what it admitted under them, the unspent \
         part, and how the grantor settled them; whether a crash caught unspent credit is \
         read from the books, not assumed from the load. A state file's mark runs a chunk \
         (at least 64 units, or twice the demand over the refresh horizon) ahead of \
         spending so that admissions never wait for the disk; a holder seldom holds more \
         than that, so a release at the mark also counts most unspent credit spent.",
        cfg0.rate_per_s,
        cfg0.burst,
        cfg0.lease_ttl_ms,
        cfg0.refresh_horizon_ms,
        LOAD_HIGH_PCT,
        cfg0.offered_per_s(),
        LOAD_LOW_PCT,
        DOWN_MS,
    );
    let mut out = report(
        (NAME, opts),
        "Agent crashes with and without state files (production code)",
        &about,
        log,
        (series, chart),
    );
    for (label, cfg, r) in &runs {
        run_facts(&mut out, label, r, cfg);
        out.fact(&format!("{label}: crashes"), r.settlements.len());
        out.fact(
            &format!("{label}: crashes holding unspent credit"),
            with_unspent(r),
        );
        out.fact(
            &format!("{label}: crashes right after spending all held (at most 1 unit left)"),
            all_spent(r),
        );
        out.fact(
            &format!("{label}: unspent credit at the crashes"),
            r.settlements
                .iter()
                .map(Settlement::unspent_at_crash)
                .sum::<u64>(),
        );
        out.fact(
            &format!("{label}: credit counted spent beyond what the crashed runs admitted"),
            counted_beyond_admitted(r),
        );
        for s in &r.settlements {
            crash_facts(&mut out, label, cfg, s);
        }
    }
    Ok(out)
}

/// One crash: what its leases held and the run admitted, and how they were settled.
fn crash_facts(out: &mut ScenarioReport, label: &str, cfg: &NetConfig, s: &Settlement) {
    let name = format!(
        "{label}: crash agent {} at {} ms ({}% load)",
        s.agent,
        s.crash_at_ms,
        load_at(cfg, s.crash_at_ms)
    );
    let value = format!(
        "{} leases, credit {} at the crash, admitted {}, unspent {}; {}; counted spent {}",
        s.leases,
        s.credit_at_crash,
        s.admitted,
        s.unspent_at_crash(),
        s.books(),
        s.charged()
    );
    out.fact(&name, value);
}

/// Both runs' trailing-second admissions side by side, with the one-second bound.
fn both_series(runs: &[(&str, NetConfig, NetReport)]) -> Series {
    let per: Vec<Series> = runs
        .iter()
        .map(|(_, cfg, r)| standard_series(r, cfg))
        .collect();
    let mut series = Series::new(&["t_ms", "state_files_1s", "no_state_files_1s", "bound_1s"]);
    let rows = per.iter().map(|s| s.rows.len()).min().unwrap_or(0);
    for i in 0..rows {
        let (a, b) = (&per[0].rows[i], &per[1].rows[i]);
        series.push(vec![a[0], a[1], b[1], a[3]]);
    }
    series
}
