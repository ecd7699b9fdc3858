//! Window and calendar budgets on the production code: a fixed window, a sliding window and
//! a calendar day, each on a 3-node Raft allocator whose leader crashes just before a window
//! ends while an agent is cut off across the same boundary, with faults drawn from the seed
//! besides. Windows alternate between quiet (the agents offer less than the limit, so they
//! hold credit they have not spent when the window ends) and busy (four times the limit).
//! Every window, counted on the grantor's timeline, admits at most its limit; the sliding
//! window keeps `limit + ⌊limit·T/W⌋` in every interval; busy windows are filled.

use super::window_figures::{used_in_window, window_figures, WindowFigures};
use super::{promises, report, run, STEP_MS};
use crate::error::SimError;
use crate::net::{Action, Demand, NetConfig, NetReport, Scheduled, Window, WindowCheck};
use crate::scenario::{Chart, LineStyle, RunOptions, ScenarioReport, Series};

pub const NAME: &str = "net-windows";

/// Fixed and sliding windows' length, and every window's limit.
const WINDOW_MS: u64 = 10_000;
const LIMIT: u64 = 1_000;
/// Load of the quiet windows, in percent of the offered round: 4 agents × 100 requests/s
/// × 22 % × 10 s = 880 units, below the limit.
const QUIET_PCT: u32 = 22;
/// The calendar's zone and the instant its clocks skip from 24:00 on 5 September 2026 to
/// 01:00 on the 6th (04:00 UTC): a midnight and a daylight-saving change at once, so the
/// day after it is 23 hours long.
const CALENDAR_ZONE: &str = "America/Santiago";
const CALENDAR_CHANGE_UNIX_S: u64 = 1_788_667_200;
/// When the calendar run starts before the change, in milliseconds: its first boundary
/// falls where the fixed windows' does.
const CALENDAR_LEAD_MS: u64 = WINDOW_MS;
/// The agent cut off from every allocator, from this long before a boundary until this
/// long after it.
const CUT_AGENT: usize = 0;
const CUT_BEFORE_MS: u64 = 2_000;
const CUT_AFTER_MS: u64 = 3_000;
/// The leader crashes this long before the boundary, and the crashed node restarts this
/// long after the crash.
const CRASH_BEFORE_MS: u64 = 300;
const CRASH_DOWN_MS: u64 = 3_000;

/// The three policies, by label.
fn windows() -> [(&'static str, Window); 3] {
    [
        (
            "fixed",
            Window::Fixed {
                window_ms: WINDOW_MS,
                limit: LIMIT,
            },
        ),
        (
            "sliding",
            Window::Sliding {
                window_ms: WINDOW_MS,
                limit: LIMIT,
            },
        ),
        (
            "calendar",
            Window::CalendarDay {
                zone: CALENDAR_ZONE.into(),
                limit: LIMIT,
            },
        ),
    ]
}

/// The window boundaries the scripted faults straddle, in ms of the run: the first of
/// every run, and at full size the third one too.
fn fault_boundaries_ms(opts: &RunOptions) -> Vec<u64> {
    opts.scale
        .pick(vec![WINDOW_MS, 3 * WINDOW_MS], vec![WINDOW_MS])
}

fn config(opts: &RunOptions, window: Window) -> NetConfig {
    let s = opts.scale;
    let duration_ms = s.pick(4, 2) * WINDOW_MS;
    let mut script = Vec::new();
    for at_ms in fault_boundaries_ms(opts) {
        script.extend(super::outage(
            at_ms - CUT_BEFORE_MS,
            at_ms + CUT_AFTER_MS,
            Action::Partition { agent: CUT_AGENT },
            Action::Repair { agent: CUT_AGENT },
        ));
        script.extend(super::outage(
            at_ms - CRASH_BEFORE_MS,
            at_ms - CRASH_BEFORE_MS + CRASH_DOWN_MS,
            Action::CrashLeader,
            Action::RestartAllocators,
        ));
    }
    script.sort_by_key(|s: &Scheduled| s.at_ms);
    // Even windows quiet, odd ones busy (the calendar's second day is the busy one).
    let steps = (0..duration_ms / WINDOW_MS)
        .map(|k| (k * WINDOW_MS, if k % 2 == 0 { QUIET_PCT } else { 100 }))
        .collect();
    let start_unix_s = match window {
        Window::CalendarDay { .. } => CALENDAR_CHANGE_UNIX_S - CALENDAR_LEAD_MS / 1_000,
        _ => crate::net::START_UNIX_S_DEFAULT,
    };
    NetConfig {
        agents: 4,
        duration_ms,
        window: Some(window),
        start_unix_s,
        // Grants cover a second of demand, so quiet windows end with credit held.
        refresh_horizon_ms: 1_000,
        faults: s.pick(6, 3),
        cluster: 3,
        // The script crashes the leader; a drawn restart could bring it back before it was
        // replaced.
        draw_allocator_faults: false,
        demand: Demand::Load { steps },
        script,
        ..NetConfig::quick()
    }
}

/// One policy's run and what the scenario reads from it.
struct WindowRun {
    label: &'static str,
    cfg: NetConfig,
    report: NetReport,
    check: WindowCheck,
    figures: Vec<WindowFigures>,
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let mut log = crate::promises::PromiseLog::default();
    let mut runs = Vec::new();
    for (label, window) in windows() {
        let cfg = config(opts, window);
        let r = run(opts, &cfg)?;
        log.merge(&promises(&r, label));
        let check = r.windows.clone().ok_or_else(|| {
            SimError::Net(crate::net::NetError::Failed {
                seed: opts.seed,
                at_ms: cfg.duration_ms,
                reason: "a window run returned no window check".into(),
            })
        })?;
        let figures = window_figures(opts.seed, &cfg, &check);
        runs.push(WindowRun {
            label,
            cfg,
            report: r,
            check,
            figures,
        });
    }
    let cfg0 = &runs[0].cfg;
    let about = format!(
        "Three production allocator nodes (openraft, sled storage) serve four production \
         agents over the simulated network; the policy is, in turn, a fixed window and a \
         sliding window of {} units per {} s (windows aligned to UNIX time) and a calendar \
         quota of {} units per day in {} starting {} s before its clocks skip from 24:00 to \
         01:00 (6 September 2026), so the run crosses a midnight that is also a \
         daylight-saving change. The load alternates every {} s between quiet ({} % of 400 \
         requests/s, below the limit) and busy (400 requests/s), starting quiet: each fixed \
         or sliding window is quiet or busy as a whole, and the calendar's second day opens \
         busy. Leases of {} ms cover a second of demand and end with their window. Across \
         the boundaries at {:?} ms agent {} is cut off from every allocator from {} ms \
         before to {} ms after, and the leader crashes {} ms before (restarting {} ms \
         later); {} more faults (agent partitions, agent crashes, latency changes) are \
         drawn from the seed. \
         Admissions are placed on the grantor's timeline (the latest command time the nodes \
         applied, sampled every step) and counted per window, computed by the checker: at \
         most the limit each, and for the sliding window at most limit + ⌊limit·T/W⌋ in \
         every interval T. The series has the units used so far in each run's current \
         window.",
        LIMIT,
        WINDOW_MS / 1_000,
        LIMIT,
        CALENDAR_ZONE,
        CALENDAR_LEAD_MS / 1_000,
        WINDOW_MS / 1_000,
        QUIET_PCT,
        cfg0.lease_ttl_ms,
        fault_boundaries_ms(opts),
        CUT_AGENT,
        CUT_BEFORE_MS,
        CUT_AFTER_MS,
        CRASH_BEFORE_MS,
        CRASH_DOWN_MS,
        cfg0.faults,
    );
    let chart = Chart::new(
        "Window and calendar budgets through a partition and leader crashes (production code)",
        "simulated time (ms)",
        "units admitted in the current window",
    );
    let chart = runs
        .iter()
        .fold(chart, |c, w| {
            c.line(&format!("{}_used", w.label), w.label, LineStyle::Solid)
        })
        .line("limit", "limit per window", LineStyle::Dashed);
    let mut out = report(
        (NAME, opts),
        "Window and calendar budgets through a partition and leader crashes (production code)",
        &about,
        log,
        (series(&runs), chart),
    );
    for w in &runs {
        facts(&mut out, w, opts);
    }
    Ok(out)
}

/// Per step: the units used so far in each run's current window, and the limit.
fn series(runs: &[WindowRun]) -> Series {
    let mut cols: Vec<String> = vec!["t_ms".into()];
    cols.extend(runs.iter().map(|w| format!("{}_used", w.label)));
    cols.push("limit".into());
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut series = Series::new(&cols);
    let steps = runs.iter().map(|w| w.cfg.duration_ms).max().unwrap_or(0) / STEP_MS;
    for i in 1..=steps {
        let at_ms = i * STEP_MS;
        let mut row = vec![at_ms];
        row.extend(runs.iter().map(|w| used_in_window(&w.check, at_ms)));
        row.push(LIMIT);
        series.push(row);
    }
    series
}

/// The facts of one run, each named after its label.
fn facts(out: &mut ScenarioReport, w: &WindowRun, opts: &RunOptions) {
    let (label, r, check) = (w.label, &w.report, &w.check);
    let name = |n: &str| format!("{label}: {n}");
    let limit = check.window.limit();
    out.fact(&name("offered"), r.offered);
    out.fact(&name("admitted"), r.admissions.len());
    out.fact(&name("windows"), check.windows.len());
    out.fact(&name("windows over their limit"), check.over);
    let most = check.windows.iter().map(|c| c.admitted).max().unwrap_or(0);
    out.fact(&name("most admitted in a window"), most);
    out.fact(&name("unplaced admissions"), check.unplaced);
    if let Some(s) = &check.sliding {
        out.fact(&name("intervals checked"), s.windows);
        out.fact(&name("intervals over limit + ⌊limit·T/W⌋"), s.violations);
    }
    let busy: Vec<&WindowFigures> = w.figures.iter().filter(|f| f.busy(limit)).collect();
    out.fact(&name("busy windows"), busy.len());
    let lowest = busy.iter().map(|f| f.utilisation_pct(limit)).min();
    out.fact(
        &name("lowest utilisation of a busy window (%)"),
        lowest.unwrap_or(0),
    );
    for (i, f) in w.figures.iter().enumerate() {
        if let Window::CalendarDay { .. } = check.window {
            out.fact(&name(&format!("day {i} hours")), hours(f));
        }
        out.fact(
            &name(&format!("window {i} ({})", span_text(check, f))),
            format!(
                "admitted {} of {} ({} %), offered {}, {} ms in the run, longest stall {} ms",
                f.admitted,
                limit,
                f.utilisation_pct(limit),
                f.offered,
                f.in_run_ms,
                f.stall_ms
            ),
        );
    }
    out.fact(
        &name("timeline behind true time, most (ms)"),
        check.timeline.lag_ns_max(check.start_unix_ns) / 1_000_000,
    );
    out.fact(
        &name("timeline behind true time at the end (ms)"),
        check.timeline.lag_ns_at_end(check.start_unix_ns) / 1_000_000,
    );
    out.fact(
        &name("most admitted in a window laid on true time"),
        check.most_on_true_time,
    );
    fault_facts(out, w, opts);
}

/// What the scripted faults did: the lease versions the cut-off agent and the others
/// received while it was cut off, and the leaders around each crash.
fn fault_facts(out: &mut ScenarioReport, w: &WindowRun, opts: &RunOptions) {
    let (label, r) = (w.label, &w.report);
    let name = |n: &str| format!("{label}: {n}");
    let cut_ms: Vec<(u64, u64)> = fault_boundaries_ms(opts)
        .into_iter()
        .map(|at_ms| (at_ms - CUT_BEFORE_MS, at_ms + CUT_AFTER_MS))
        .collect();
    let while_cut = |t: &u64| {
        cut_ms
            .iter()
            .any(|(f, u)| (*f..*u).contains(&(t / 1_000_000)))
    };
    let received = |agents: &mut dyn Iterator<Item = usize>| -> usize {
        agents
            .filter_map(|a| r.lease_versions_received_ns.get(a))
            .map(|at| at.iter().filter(|t| while_cut(t)).count())
            .sum()
    };
    out.fact(
        &name("cut-off agent's lease versions received while cut off"),
        received(&mut std::iter::once(CUT_AGENT)),
    );
    out.fact(
        &name("other agents' lease versions received meanwhile"),
        received(&mut (0..w.cfg.agents).filter(|a| *a != CUT_AGENT)),
    );
    let cut_admitted = r
        .admissions
        .iter()
        .filter(|a| a.agent as usize == CUT_AGENT && while_cut(&a.at_ns))
        .count();
    out.fact(
        &name("cut-off agent's admissions while cut off (held credit)"),
        cut_admitted,
    );
    let crashes = r.leader_crashes();
    out.fact(&name("leader crashes"), crashes.len());
    let new_leaders = crashes
        .iter()
        .filter(|(at_ms, node)| {
            r.leaders
                .iter()
                .any(|l| l.at_ms > *at_ms && l.node != *node)
        })
        .count();
    out.fact(
        &name("leader crashes followed by another leader"),
        new_leaders,
    );
    out.fact(&name("leaders elected"), r.leaders.len());
    out.fact(&name("agent crashes"), r.settlements.len());
    out.fact(
        &name("ledger conserved on every running node"),
        r.ledger_conserved,
    );
    if let Some(g) = &r.grantor {
        out.fact(&name("lapsed (window ended unspent)"), g.lapsed);
        out.fact(
            &name("stranded (written off at expiry)"),
            g.figures.stranded,
        );
    }
    out.fact(&name("grantor calls"), r.grantor_calls);
}

/// A window's span as the calendar shows it: UTC for fixed windows, the zone's civil time
/// (with its offset) for calendar days.
fn span_text(check: &WindowCheck, f: &WindowFigures) -> String {
    let show = |ns: u64| -> String {
        let Ok(t) = jiff::Timestamp::from_nanosecond(i128::from(ns)) else {
            return ns.to_string();
        };
        match &check.window {
            Window::CalendarDay { zone, .. } => t
                .in_tz(zone)
                .map_or_else(|_| t.to_string(), |z| z.strftime("%F %T%:z").to_string()),
            _ => t.strftime("%T").to_string(),
        }
    };
    let hours = match check.window {
        Window::CalendarDay { .. } => format!(", {} h", hours(f)),
        _ => String::new(),
    };
    format!("{} to {}{hours}", show(f.start_ns), show(f.end_ns))
}

/// A window's length in whole hours.
fn hours(f: &WindowFigures) -> u64 {
    (f.end_ns - f.start_ns) / 3_600_000_000_000
}
