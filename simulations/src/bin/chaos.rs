//! `leasehold-chaos`: the chaos suite and the failover measurement on the real binaries.
//!
//! ```text
//! leasehold-chaos failover --kills 30              # SIGKILL the leader 30 times
//! leasehold-chaos run --seed 7 --duration-s 60     # seeded faults under traffic
//! ```
//! The allocator and agent binaries are taken from `--bin-dir`, by default the directory
//! this program is in (cargo builds every binary of the workspace there).

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use leasehold_simulations::chaos::failover::{run_failover, FailoverConfig};
use leasehold_simulations::chaos::procs::Binaries;
use leasehold_simulations::chaos::run::{run_chaos, ChaosConfig};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "leasehold-chaos",
    version,
    about = "Faults on real Leasehold processes"
)]
struct Args {
    /// Directory holding leasehold-allocator and leasehold-agent.
    #[arg(long, global = true)]
    bin_dir: Option<PathBuf>,
    /// Keep configs, data and logs in this directory (default: a temporary one, removed).
    #[arg(long, global = true)]
    work_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Kill the leader of a 3-node cluster with SIGKILL repeatedly and measure the time
    /// until a write commits again.
    Failover {
        #[arg(long, default_value_t = 20)]
        kills: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The nodes' `raft:` mapping, e.g. `{heartbeat_ms: 100, election_min_ms: 400,
        /// election_max_ms: 800}`; default: the product defaults.
        #[arg(long)]
        raft: Option<String>,
    },
    /// Seeded faults under traffic; exits 1 if any window exceeds `B + r·T` or the
    /// ledgers do not account for what was admitted.
    Run {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 60)]
        duration_s: u64,
        #[arg(long, default_value_t = 5)]
        agents: usize,
        /// Longest a fault is held before it is healed, in milliseconds.
        #[arg(long, default_value_t = 4_000)]
        fault_hold_max_ms: u64,
        /// Longest quiet time after a fault is healed, in milliseconds.
        #[arg(long, default_value_t = 3_000)]
        settle_max_ms: u64,
        /// Nodes of the region cluster leasing from the root (0: no region).
        #[arg(long, default_value_t = 3)]
        region_nodes: u64,
        /// How many agents (the first ones) lease from the region.
        #[arg(long, default_value_t = 2)]
        region_agents: usize,
    },
}

fn binaries(dir: Option<PathBuf>) -> Result<Binaries> {
    Ok(match dir {
        Some(dir) => Binaries::in_dir(&dir)?,
        None => Binaries::beside_this_program()?,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    let bins = binaries(args.bin_dir)?;
    match args.cmd {
        Cmd::Failover { kills, seed, raft } => {
            if kills == 0 {
                bail!("--kills must be at least 1");
            }
            let cfg = FailoverConfig {
                kills,
                seed,
                raft_yaml: raft,
                work_dir: args.work_dir,
            };
            let report = run_failover(&bins, &cfg, |k| {
                let at = jiff::Timestamp::try_from(k.at).map_or(String::new(), |t| t.to_string());
                println!(
                    "kill {:>3}: leader global-{} killed at {at}; a write committed after {} ms",
                    k.index + 1,
                    k.leader,
                    k.served_ms
                );
            })
            .await
            .context("failover measurement")?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Cmd::Run {
            seed,
            duration_s,
            agents,
            fault_hold_max_ms,
            settle_max_ms,
            region_nodes,
            region_agents,
        } => {
            let cfg = ChaosConfig {
                seed,
                duration_s,
                agents,
                fault_hold_max_ms,
                settle_max_ms,
                region_nodes,
                region_agents,
                work_dir: args.work_dir,
                ..ChaosConfig::default()
            };
            let report = run_chaos(&bins, &cfg, |f| {
                println!(
                    "{:>8} ms  {:<45} held {:>5} ms  stall {:>5} ms",
                    f.at_ms,
                    format!("{:?}", f.fault),
                    f.hold_ms,
                    f.stall_ms
                );
            })
            .await
            .context("chaos run")?;
            for why in &report.skipped {
                println!("skipped: {why}");
            }
            println!("{}", serde_json::to_string_pretty(&report.verdict)?);
            if !report.verdict.passed {
                bail!("the run failed its checks (seed {seed})");
            }
        }
    }
    Ok(())
}
