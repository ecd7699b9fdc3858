//! The Leasehold demo: a real hierarchy on loopback. Starts a 3-node global allocator
//! cluster, two regional clusters leasing from it and a cell of agents per region, all with
//! mutual TLS, in this process; drives Zipf-skewed tenant traffic whose hot spots move
//! between the regions; prints progress per level every second and a summary that checks
//! every window of admissions against `B + r·T`. Exits non-zero on any violation.
//!
//! The seeded in-process ledger simulation is `leasehold-sim`.

use anyhow::{bail, Result};
use clap::Parser;
use leasehold_simulations::live::{self, summary, LiveConfig};

#[derive(Parser, Debug)]
#[command(
    name = "leasehold-demo",
    about = "A global → region → agent hierarchy on loopback, under synthetic traffic"
)]
struct Args {
    /// Seconds of traffic, once the hierarchy is up.
    #[arg(long, default_value_t = LiveConfig::default().duration_ms / 1_000)]
    duration: u64,
    /// Print the summary as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Seed of the synthetic traffic.
    #[arg(long, default_value_t = LiveConfig::default().seed)]
    seed: u64,
    /// Agents in each region's cell.
    #[arg(long, default_value_t = LiveConfig::default().agents_per_region)]
    agents_per_region: usize,
    /// Tenants, each a key of the policy with its own budget.
    #[arg(long, default_value_t = LiveConfig::default().tenants)]
    tenants: usize,
    /// Policy rate per tenant, units per second.
    #[arg(long, default_value_t = LiveConfig::default().rate_per_sec)]
    rate: u64,
    /// Policy burst per tenant, units.
    #[arg(long, default_value_t = LiveConfig::default().burst)]
    burst: u64,
    /// Load of the lightest tenant as a percentage of the rate (heavier tenants offer more).
    #[arg(long, default_value_t = LiveConfig::default().load_pct)]
    load_pct: u64,
    /// Seconds between moves of each tenant's hot spot to the next region.
    #[arg(long, default_value_t = LiveConfig::default().hot_spot_every_ms / 1_000)]
    hot_spot_every: u64,
    /// Lease time to live of the policy, milliseconds.
    #[arg(long, default_value_t = LiveConfig::default().lease_ttl_ms)]
    lease_ttl_ms: u64,
    /// Refresh horizon of the policy, milliseconds.
    #[arg(long, default_value_t = LiveConfig::default().refresh_horizon_ms)]
    refresh_horizon_ms: u64,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

/// Two workers: the demo shares the machine, and the hierarchy needs no more.
const WORKER_THREADS: usize = 2;

fn main() -> Result<()> {
    let args = Args::parse();
    let cfg = LiveConfig {
        duration_ms: args.duration.saturating_mul(1_000),
        seed: args.seed,
        agents_per_region: args.agents_per_region,
        tenants: args.tenants,
        rate_per_sec: args.rate,
        burst: args.burst,
        load_pct: args.load_pct,
        hot_spot_every_ms: args.hot_spot_every.saturating_mul(1_000),
        lease_ttl_ms: args.lease_ttl_ms,
        refresh_horizon_ms: args.refresh_horizon_ms,
        ..LiveConfig::default()
    };
    cfg.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .enable_all()
        .build()?;
    eprintln!(
        "starting 3 global allocator nodes, regions {:?} and {} agents per region on 127.0.0.1 …",
        live::REGIONS,
        cfg.agents_per_region
    );
    let quiet = args.quiet;
    let result = runtime.block_on(live::run(&cfg, |s| {
        if !quiet {
            eprint!("{}", summary::format_progress(s));
        }
    }))?;
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&result)?)
    } else {
        summary::format_summary(&result)
    };
    write_stdout(&text)?;
    let violations = result.violations();
    if violations > 0 {
        bail!("{violations} windows admitted more than B + r·T");
    }
    Ok(())
}

/// Writes the summary; a reader that has gone (`leasehold-demo --json | head`) is not an error
/// of the run, whose verdict is the exit status.
fn write_stdout(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => Ok(done?),
    }
}
