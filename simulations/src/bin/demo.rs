//! The Leasehold demo: a root, two regions and their agents sharing one tenant's budget under
//! skewed, shifting traffic, with an agent crash on the way. Prints per-level progress and a
//! summary checking every window of admissions against `B + r·T`.

use anyhow::{bail, Result};
use clap::Parser;
use leasehold_simulations::hierarchy::{Hierarchy, HierarchyConfig, LevelView, KEY, POLICY_ID};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "leasehold-demo",
    about = "Leased credit across a global → region → agent hierarchy"
)]
struct Args {
    /// Simulated seconds to run.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Print only a JSON summary at the end.
    #[arg(long)]
    json: bool,
    /// Seed of the traffic; a run replays exactly from its seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 2)]
    regions: usize,
    #[arg(long, default_value_t = 4)]
    agents_per_region: usize,
    /// Policy rate, units per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Policy burst, units.
    #[arg(long, default_value_t = 2_000)]
    burst: u64,
    /// Offered load as a percentage of the rate.
    #[arg(long, default_value_t = 150)]
    load_pct: u64,
    /// Print progress every this many simulated seconds.
    #[arg(long, default_value_t = 5)]
    progress_every: u64,
    /// Simulated seconds per wall-clock second (0: as fast as possible).
    #[arg(long, default_value_t = 10)]
    speed: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let cfg = HierarchyConfig {
        seed: args.seed,
        regions: args.regions,
        agents_per_region: args.agents_per_region,
        rate_per_sec: args.rate,
        burst: args.burst,
        duration_s: args.duration,
        load_factor_pct: args.load_pct,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg).map_err(anyhow::Error::msg)?;
    let steps = args.duration * 1_000 / sim.config().step_ms;
    let steps_per_progress = (args.progress_every.max(1) * 1_000 / sim.config().step_ms).max(1);
    let started = Instant::now();
    if !args.json {
        print_header(&sim);
    }
    for n in 1..=steps {
        sim.step();
        if !args.json && n % steps_per_progress == 0 {
            print_progress(&sim);
            pace(started, sim.now_ns(), args.speed);
        }
    }
    let check = sim.check();
    let levels = sim.levels();
    let bound = sim.bound();
    let admitted = levels.agents.admitted;
    let utilisation = admitted as f64 / bound.max(1) as f64;
    let stranded = levels.root_stranded + levels.regions_stranded;
    let conserved = sim.conserved();
    if args.json {
        let summary = json!({
            "seed": args.seed,
            "duration_s": args.duration,
            "policies": [{
                "policy": POLICY_ID,
                "key": KEY,
                "offered": levels.agents.offered,
                "admitted": admitted,
                "rejected": levels.agents.rejected,
                "bound": bound,
                "violations": check.violations,
                "windows_checked": check.windows,
                "utilisation": utilisation,
                "stranded": stranded,
            }],
            "levels": levels,
            "conserved": conserved,
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&levels, bound, &check, utilisation, stranded, conserved);
    }
    if check.violations > 0 || !conserved {
        bail!(
            "a promise was broken: {} window violations, conserved = {conserved}",
            check.violations
        );
    }
    Ok(())
}

fn pace(started: Instant, sim_ns: u64, speed: u64) {
    if speed == 0 {
        return;
    }
    let due = Duration::from_nanos(sim_ns / speed);
    if let Some(wait) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(wait);
    }
}

fn print_header(sim: &Hierarchy) {
    let c = sim.config();
    println!(
        "policy {POLICY_ID}: rate {}/s, burst {}; {} regions × {} agents; load {}% of rate; seed {}",
        c.rate_per_sec, c.burst, c.regions, c.agents_per_region, c.load_factor_pct, c.seed
    );
    println!(
        "{:>6} | {:>10} {:>10} | {:>10} {:>8} | {:>9} {:>9} {:>9} | {:>9} {:>6}",
        "t",
        "root grant",
        "root out",
        "reg grant",
        "reg idle",
        "offered",
        "admitted",
        "rejected",
        "bound",
        "used"
    );
}

fn print_progress(sim: &Hierarchy) {
    let v = sim.levels();
    let bound = sim.bound();
    println!(
        "{:>5}s | {:>10} {:>10} | {:>10} {:>8} | {:>9} {:>9} {:>9} | {:>9} {:>5.1}%",
        sim.now_ns() / 1_000_000_000,
        v.root_granted,
        v.root_outstanding,
        v.regions_granted,
        v.regions_idle,
        v.agents.offered,
        v.agents.admitted,
        v.agents.rejected,
        bound,
        100.0 * v.agents.admitted as f64 / bound.max(1) as f64
    );
}

fn print_summary(
    v: &LevelView,
    bound: u64,
    check: &leasehold_simulations::bound::BoundCheck,
    utilisation: f64,
    stranded: u64,
    conserved: bool,
) {
    println!();
    println!("summary for {KEY}");
    println!("  offered   {:>10}", v.agents.offered);
    println!(
        "  admitted  {:>10}   bound B + r·T = {bound}   ({:.1}% of the bound)",
        v.agents.admitted,
        100.0 * utilisation
    );
    println!("  rejected  {:>10}", v.agents.rejected);
    println!(
        "  stranded  {:>10}   (credit written off after the agent crash, never re-granted)",
        stranded
    );
    println!(
        "  windows   {:>10} checked, {} over the bound (worst excess {})",
        check.windows, check.violations, check.worst_excess
    );
    println!("  ledgers   every unit accounted for exactly once: {conserved}");
}
