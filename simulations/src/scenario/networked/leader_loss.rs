//! Leader loss on the production Raft allocator: a 3-node cluster loses its leader several
//! times under traffic, at instants when agent calls (grants, reports, releases) are on the
//! wire. The agents retry on another node by request id; a new leader is elected from the
//! replicated log, admissions go on, and no credit is granted twice: every node's ledger
//! balances and the bound holds.

use super::{promises, report, run, run_facts, standard_series, STEP_MS};
use crate::error::SimError;
use crate::net::{Action, LeaderTerm, NetConfig, NetReport, Scheduled};
use crate::scenario::{LineStyle, RunOptions, ScenarioReport, Series};

pub const NAME: &str = "net-leader-loss";

/// How long a crashed leader stays down before every crashed allocator restarts.
const DOWN_MS: u64 = 3_000;
/// One-way link latency at most: long enough that agent calls spend time on the wire.
const LATENCY_MS: u64 = 25;

/// The leader crashes: one every `every_ms` from `first_ms`, each a few milliseconds off the
/// round instant, so that they do not all fall at the same point of the agents' report
/// cycle.
fn crash_instants(opts: &RunOptions) -> Vec<u64> {
    let s = opts.scale;
    let (first_ms, every_ms, crashes) = (s.pick(4_000, 2_500), s.pick(5_000, 3_500), s.pick(5, 2));
    (0..crashes)
        .map(|i| first_ms + i * every_ms + 37 * i)
        .collect()
}

fn config(opts: &RunOptions) -> NetConfig {
    let mut script = Vec::new();
    for at_ms in crash_instants(opts) {
        script.push(Scheduled {
            at_ms,
            action: Action::CrashLeader,
        });
        script.push(Scheduled {
            at_ms: at_ms + DOWN_MS,
            action: Action::RestartAllocators,
        });
    }
    NetConfig {
        agents: 4,
        duration_ms: opts.scale.pick(30_000, 10_000),
        faults: 0,
        cluster: 3,
        leader_crash_at_ms: None,
        latency_ms_base: LATENCY_MS,
        latency_ms_max: LATENCY_MS,
        script,
        ..NetConfig::quick()
    }
}

/// One leader crash as it happened: when, the node it hit, the calls on the wire then, and
/// the leader elected after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderCrash {
    pub at_ms: u64,
    pub node: u64,
    pub in_flight: u64,
    pub next: Option<LeaderTerm>,
    /// Admissions in the second after the next leader was seen.
    pub admitted_after: usize,
}

/// Every leader crash of `r` that hit a node.
pub fn leader_crashes(r: &NetReport) -> Vec<LeaderCrash> {
    r.leader_crashes()
        .into_iter()
        .map(|(at_ms, node)| {
            let in_flight = r
                .leader_crash_in_flight
                .iter()
                .find(|(t, _)| *t == at_ms)
                .map_or(0, |(_, n)| *n);
            let next = r
                .leaders
                .iter()
                .find(|l| l.at_ms > at_ms && l.node != node)
                .copied();
            let admitted_after = next.map_or(0, |l| {
                let (from, until) = (l.at_ms * 1_000_000, (l.at_ms + 1_000) * 1_000_000);
                r.admissions
                    .iter()
                    .filter(|a| (from..until).contains(&a.at_ns))
                    .count()
            });
            LeaderCrash {
                at_ms,
                node,
                in_flight,
                next,
                admitted_after,
            }
        })
        .collect()
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let cfg = config(opts);
    let r = run(opts, &cfg)?;
    let log = promises(&r, "cluster");
    let series = with_leader(&r, &cfg);
    let chart = super::per_second_chart(
        "Leader crashes of a 3-node Raft allocator under traffic (production code)",
    )
    .line("admitted_1s", "admitted (charged)", LineStyle::Solid)
    .line("bound_1s", "B + r·1s", LineStyle::Dashed);
    let about = format!(
        "Three production allocator nodes (openraft, sled storage) serve four production \
         agents over the simulated network, r = {} units/s, B = {}, leases of {} ms, offered \
         {} units/s, links up to {} ms one way, Raft heartbeats every {} ms. The node leading \
         at each of {:?} ms crashes (keeping only its storage) and every crashed node restarts \
         {} ms later. Agents whose calls were on the wire get no answer and resend the same \
         request id to the next node. The series has the leader's node id per step (0 while \
         none is known); the facts give per crash the calls on the wire, the next leader and \
         the admissions in the second after it was elected. Every node's ledger is checked \
         to account for every unit at the end, and admissions against B + r·T over every \
         window.",
        cfg.rate_per_s,
        cfg.burst,
        cfg.lease_ttl_ms,
        cfg.offered_per_s(),
        LATENCY_MS,
        cfg.raft_heartbeat_ms,
        crash_instants(opts),
        DOWN_MS,
    );
    let mut out = report(
        (NAME, opts),
        "Leader crashes of a 3-node Raft allocator (production code)",
        &about,
        log,
        (series, chart),
    );
    run_facts(&mut out, "", &r, &cfg);
    let crashes = leader_crashes(&r);
    out.fact("leader crashes", crashes.len());
    out.fact(
        "leader crashes with agent calls on the wire",
        crashes.iter().filter(|c| c.in_flight > 0).count(),
    );
    out.fact("leaders elected", r.leaders.len());
    out.fact("ledger conserved on every running node", r.ledger_conserved);
    for c in &crashes {
        let next = c.next.map_or("none".to_string(), |l| {
            format!("node {} at {} ms (term {})", l.node, l.at_ms, l.term)
        });
        out.fact(
            &format!("crash at {} ms", c.at_ms),
            format!(
                "leader node {}, {} calls on the wire; next leader {next}; {} admitted in \
                 the second after",
                c.node, c.in_flight, c.admitted_after
            ),
        );
    }
    let terms: Vec<String> = r
        .leaders
        .iter()
        .map(|l| format!("{}@{}ms", l.node, l.at_ms))
        .collect();
    out.fact("leaders over time (node@from)", terms.join(" "));
    Ok(out)
}

/// The standard series plus the leader's node id at the end of each step (0: none known).
fn with_leader(r: &NetReport, cfg: &NetConfig) -> Series {
    let base = standard_series(r, cfg);
    let mut cols: Vec<&str> = base.columns.iter().map(String::as_str).collect();
    cols.push("leader_node");
    let mut series = Series::new(&cols);
    for (i, row) in base.rows.iter().enumerate() {
        let end_ms = (i as u64 + 1) * STEP_MS;
        let leader = leader_at(r, end_ms).unwrap_or(0);
        let mut row = row.clone();
        row.push(leader);
        series.push(row);
    }
    series
}

/// The leader known at `at_ms`, unless it has crashed since and no successor is known.
fn leader_at(r: &NetReport, at_ms: u64) -> Option<u64> {
    let last = r.leaders.iter().rev().find(|l| l.at_ms <= at_ms)?;
    let crashed_since = r
        .leader_crashes()
        .iter()
        .any(|(t, node)| *node == last.node && (last.at_ms..=at_ms).contains(t));
    (!crashed_since).then_some(last.node)
}
