//! `leasehold-sim`: runs the named simulation scenarios, writes their figures, and fuzzes
//! random fault schedules over many seeds, and runs the production allocator and agents on
//! a simulated network (`net`).

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use leasehold_simulations::net::{self, NetConfig, RolloutSpec};
use leasehold_simulations::output::{write_report, DEFAULT_OUT_DIR};
use leasehold_simulations::scenario::{self, fuzz, RunOptions, Scale, ScenarioReport};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Most seeds one fuzz invocation runs.
const FUZZ_SEEDS_MAX: u64 = 1_000_000;
/// Most seeds one net invocation runs (each is a full networked run).
const NET_SEEDS_MAX: u64 = 10_000;

#[derive(Parser)]
#[command(
    name = "leasehold-sim",
    about = "Seeded simulations of the Leasehold hierarchy"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// The seed everything in the run derives from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for the CSV, SVG and Markdown outputs.
    #[arg(long, default_value = DEFAULT_OUT_DIR)]
    out: PathBuf,
    /// Smaller, shorter runs (as the tests use).
    #[arg(long)]
    quick: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Lists the scenarios.
    List,
    /// Runs one scenario.
    Run {
        scenario: String,
        #[command(flatten)]
        common: Common,
    },
    /// Runs every scenario.
    All {
        #[command(flatten)]
        common: Common,
    },
    /// Runs random fault schedules over many seeds; fails on the first broken promise.
    Fuzz {
        /// How many seeds to try.
        #[arg(long)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Smaller, shorter runs.
        #[arg(long)]
        quick: bool,
    },
    /// Runs the production allocator service (one node, or a Raft cluster) and agents on a
    /// simulated network (turmoil) with seeded partitions, latency changes, agent crashes,
    /// clock steps and leader crashes; fails on the first seed that admits more than
    /// B + r·T in some window, or whose grantor took back credit a crashed agent had spent.
    Net(NetArgs),
    /// Measures what a root's Raft group carries under many regions: regions, keys and
    /// agents in one process on a paused clock (the production allocator state and
    /// upstream driver); prints the figures as JSON.
    RootScale(RootScaleArgs),
}

#[derive(clap::Args)]
struct RootScaleArgs {
    #[arg(long, default_value_t = 100)]
    regions: usize,
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    #[arg(long, default_value_t = 10_000)]
    agents: usize,
    /// Simulated seconds measured, after the warm-up.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
    /// Simulated seconds before measuring.
    #[arg(long, default_value_t = 3)]
    warmup_s: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How often a region reports on each key upstream, in milliseconds.
    #[arg(long, default_value_t = 500)]
    region_report_every_ms: u64,
}

#[derive(clap::Args)]
struct NetArgs {
    /// How many seeds to try.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Agent hosts.
    #[arg(long, default_value_t = 3)]
    agents: usize,
    /// Simulated time per seed, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    duration_ms: u64,
    /// Faults drawn per seed.
    #[arg(long, default_value_t = 4)]
    faults: usize,
    /// Runs every seed twice and fails if the two admission logs (or the crashed agents'
    /// settlements) differ.
    #[arg(long)]
    check_replay: bool,
    /// With --check-replay, the second run of each seed stands still for 1.2 s of real time
    /// every this many ms of simulated time, so that a result that depends on how fast the
    /// machine runs the simulation fails the check; 0: no pauses.
    #[arg(long, default_value_t = 0, requires = "check_replay")]
    replay_pause_every_ms: u64,
    /// Allocator hosts: 1 is a single-node replica, 3 (or 2–5) a Raft cluster whose leader
    /// crashes and isolated nodes are drawn with the other faults.
    #[arg(long, default_value_t = 1)]
    cluster: usize,
    /// Crash whichever allocator leads at this instant (ms), on every seed.
    #[arg(long)]
    crash_leader_at_ms: Option<u64>,
    /// Draw clock steps of up to this many ms (back or forward) at agent hosts; 0: none.
    #[arg(long, default_value_t = 0)]
    clock_step_ms_max: u64,
    /// Put a delegated region (a one-node Raft cluster leasing from the global allocators)
    /// between the global allocators and the agents.
    #[arg(long)]
    region: bool,
    /// Give each agent a state file on its host's disk; a crashed agent restarts with it
    /// (and settles its previous leases from it) instead of from nothing.
    #[arg(long)]
    agent_state: bool,
    /// Apply a new version of the policy through the allocator's admin service at this
    /// instant (ms); the agents get it from their watch streams.
    #[arg(long, conflicts_with = "rollout_drawn")]
    rollout_at_ms: Option<u64>,
    /// Draw a rollout from each seed instead: its instant, a fifth, half or twice the rate,
    /// and a burst from a quarter to twice the first version's.
    #[arg(long)]
    rollout_drawn: bool,
    /// The new version's rate, in units per second (the first version's is 100).
    #[arg(long, default_value_t = 50, requires = "rollout_at_ms")]
    rollout_rate: u64,
    /// The new version's burst, in units (the first version's is 200).
    #[arg(long, default_value_t = 60, requires = "rollout_at_ms")]
    rollout_burst: u64,
}

impl NetArgs {
    /// The flags that reproduce this configuration, for the replay line.
    fn replay_flags(&self) -> String {
        let mut out = format!(
            "--agents {} --duration-ms {} --faults {} --cluster {}",
            self.agents, self.duration_ms, self.faults, self.cluster
        );
        if let Some(at_ms) = self.crash_leader_at_ms {
            out.push_str(&format!(" --crash-leader-at-ms {at_ms}"));
        }
        if self.clock_step_ms_max > 0 {
            out.push_str(&format!(" --clock-step-ms-max {}", self.clock_step_ms_max));
        }
        if self.region {
            out.push_str(" --region");
        }
        if self.agent_state {
            out.push_str(" --agent-state");
        }
        if self.rollout_drawn {
            out.push_str(" --rollout-drawn");
        }
        if let Some(at_ms) = self.rollout_at_ms {
            out.push_str(&format!(
                " --rollout-at-ms {at_ms} --rollout-rate {} --rollout-burst {}",
                self.rollout_rate, self.rollout_burst
            ));
        }
        if self.check_replay {
            out.push_str(" --check-replay");
        }
        if self.replay_pause_every_ms > 0 {
            out.push_str(&format!(
                " --replay-pause-every-ms {}",
                self.replay_pause_every_ms
            ));
        }
        out
    }
}

fn main() -> Result<ExitCode> {
    match Cli::parse().command {
        Cmd::List => {
            for s in scenario::ALL {
                println!("{:<15} {}", s.name, s.about);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { scenario, common } => {
            let s = scenario::find(&scenario)?;
            let ok = run_one(s, &common)?;
            Ok(exit(ok))
        }
        Cmd::All { common } => {
            let mut ok = true;
            for s in scenario::ALL {
                ok &= run_one(s, &common)?;
            }
            Ok(exit(ok))
        }
        Cmd::Fuzz { seeds, from, quick } => fuzz_seeds(seeds, from, quick),
        Cmd::Net(args) => net_seeds(&args),
        Cmd::RootScale(a) => root_scale(&a),
    }
}

fn root_scale(a: &RootScaleArgs) -> Result<ExitCode> {
    let cfg = leasehold_simulations::scale::ScaleConfig {
        regions: a.regions,
        keys: a.keys,
        agents: a.agents,
        seconds: a.seconds,
        warmup_s: a.warmup_s,
        seed: a.seed,
        region_report_every_ms: a.region_report_every_ms,
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let report = leasehold_simulations::scale::run(&cfg).map_err(anyhow::Error::msg)?;
    let mut out = serde_json::to_value(&report)?;
    out["wall_s"] = started.elapsed().as_secs_f64().into();
    out["rss_bytes"] = rss_bytes().into();
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(exit(report.root_conserved))
}

/// The process's resident memory, from `/proc/self/statm` (0 where there is none).
fn rss_bytes() -> u64 {
    let page = 4096;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

fn scale(quick: bool) -> Scale {
    if quick {
        Scale::Quick
    } else {
        Scale::Full
    }
}

fn run_one(s: &scenario::Scenario, c: &Common) -> Result<bool> {
    let opts = RunOptions {
        seed: c.seed,
        scale: scale(c.quick),
    };
    let report = (s.run)(&opts).with_context(|| format!("scenario {}", s.name))?;
    let paths = write_report(&report, &c.out)?;
    print_outcome(&report, &paths, &c.out);
    Ok(report.passed())
}

fn print_outcome(r: &ScenarioReport, paths: &[PathBuf], out: &Path) {
    let verdict = if r.passed() { "ok" } else { "BROKEN" };
    println!("{:<15} seed {:<6} {verdict}", r.scenario, r.seed);
    for f in &r.facts {
        println!("    {}: {}", f.name, f.value);
    }
    for v in r.promises.kept() {
        println!("    {v}");
    }
    println!("    wrote {} files to {}", paths.len(), out.display());
}

fn fuzz_seeds(seeds: u64, from: u64, quick: bool) -> Result<ExitCode> {
    anyhow::ensure!(
        (1..=FUZZ_SEEDS_MAX).contains(&seeds),
        "--seeds {seeds}: must be from 1 to {FUZZ_SEEDS_MAX}"
    );
    let flag = if quick { " --quick" } else { "" };
    for seed in from..from.saturating_add(seeds) {
        let sim = fuzz::run_case(seed, scale(quick), None)?;
        let log = sim.promises();
        if let Some(v) = log.first_any() {
            println!("seed {seed}: {v}");
            println!("replay: leasehold-sim run fuzz --seed {seed}{flag}");
            return Ok(ExitCode::FAILURE);
        }
    }
    println!("{seeds} seeds from {from}: every promise held");
    Ok(ExitCode::SUCCESS)
}

fn net_seeds(args: &NetArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        (1..=NET_SEEDS_MAX).contains(&args.seeds),
        "--seeds {}: must be from 1 to {NET_SEEDS_MAX}",
        args.seeds
    );
    let cfg = NetConfig {
        agents: args.agents,
        duration_ms: args.duration_ms,
        faults: args.faults,
        cluster: args.cluster,
        leader_crash_at_ms: args.crash_leader_at_ms,
        clock_step_ms_max: args.clock_step_ms_max,
        region: args.region,
        agent_state: args.agent_state,
        rollout: args.rollout_at_ms.map(|at_ms| RolloutSpec {
            at_ms,
            rate_per_s: args.rollout_rate,
            burst: args.rollout_burst,
        }),
        rollout_drawn: args.rollout_drawn,
        ..NetConfig::quick()
    };
    let replay_cfg = NetConfig {
        real_pause_every_ms: args.replay_pause_every_ms,
        ..cfg.clone()
    };
    replay_cfg.validate()?;
    for seed in args.from..args.from.saturating_add(args.seeds) {
        let r = net::run(seed, &cfg)?;
        print_net_report(&r, &cfg);
        let difference = match args.check_replay {
            true => net::run(seed, &replay_cfg)?.replay_difference(&r),
            false => None,
        };
        if let Some(what) = difference {
            println!("    a second run of this seed did not replay it: {what}");
        }
        let replayed = difference.is_none();
        if !r.passed() || !replayed {
            println!(
                "replay: leasehold-sim net --from {seed} --seeds 1 {}",
                args.replay_flags()
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    let replay = if args.check_replay {
        ", and each replayed exactly"
    } else {
        ""
    };
    println!(
        "{} seeds from {}: P1, P2, P3, P4 and P7 held on every run{replay}",
        args.seeds, args.from
    );
    Ok(ExitCode::SUCCESS)
}

fn print_net_report(r: &net::NetReport, cfg: &NetConfig) {
    let verdict = if r.passed() { "ok" } else { "BROKEN" };
    println!(
        "seed {:<6} {verdict}: admitted {} of {} offered ({}B + r·T = {}), per agent {:?}, {} faults, {} windows, worst excess {}, log digest {:016x}",
        r.seed,
        r.admissions.len(),
        r.offered,
        if r.rollout.is_some() { "first version's " } else { "" },
        r.admitted_max,
        r.admitted_by_agent(cfg.agents),
        r.schedule.len() / 2,
        r.bound.windows,
        r.bound.worst_excess,
        r.digest(),
    );
    if !r.leaders.is_empty() {
        let leaders: Vec<String> = r
            .leaders
            .iter()
            .map(|l| format!("{}@{}ms(t{})", l.node, l.at_ms, l.term))
            .collect();
        println!(
            "    leaders {}; leader crashes {:?}",
            leaders.join(" "),
            r.leader_crashes()
        );
    }
    for s in &r.settlements {
        println!(
            "    agent {} crashed at {} ms: admitted {} under {} leases, settled {} ({}){}",
            s.agent,
            s.crash_at_ms,
            s.admitted,
            s.leases,
            s.charged(),
            s.books(),
            if s.holds() { "" } else { "  SPENT TWICE" },
        );
    }
    if let Some(ro) = &r.rollout {
        print_rollout(ro);
    }
    if !r.passed() {
        let faults: Vec<String> = r
            .applied
            .iter()
            .map(|f| format!("{}ms {:?}", f.at_ms, f.action))
            .collect();
        println!("    faults as applied: {}", faults.join(", "));
        println!(
            "    P1 violations {}, ledger conserved {}, P3 admissions past their lease {} (first {:?}), P7 miscounted agent runs {:?}, grantor within its caps {:?}",
            r.bound.violations,
            r.ledger_conserved,
            r.expiry.violations,
            r.expiry.first,
            r.miscounts,
            r.grantor.as_ref().map(net::GrantorBooks::within_caps),
        );
    }
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_rollout(r: &net::rollout::RolloutReport) {
    let ms = |ns: Option<u64>| ns.map_or("never".to_string(), |n| format!("{} ms", n / 1_000_000));
    println!(
        "    rollout to {}/s, burst {}: sent {}, applied as version {} by {} ({} calls); every agent on it from {}; final versions {:?} (out of reach after it: {:?}, restarted too late: {:?}); agents' leases on the books by version {:?}",
        r.spec.rate_per_s,
        r.spec.burst,
        ms(r.log.sent_ns),
        r.log.version,
        ms(r.log.applied_ns),
        r.log.attempts,
        ms(r.all_on_new_ns),
        r.final_versions,
        r.out_of_reach,
        r.settling,
        r.books_versions,
    );
    let c = &r.check;
    println!(
        "    P1 per version: before {}/{} windows over, transition (to {} ms) {}/{}, after {}/{}{}",
        c.before.violations,
        c.before.windows,
        c.transition_end_ns / 1_000_000,
        c.transition.violations,
        c.transition.windows,
        c.after.violations,
        c.after.windows,
        if r.holds() { "" } else { "  ROLLOUT BROKEN" },
    );
}
