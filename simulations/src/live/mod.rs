//! The live demo: a real hierarchy on loopback.
//!
//! In one process, on 127.0.0.1 with ephemeral ports and a temporary directory: a 3-node
//! global allocator cluster, two regional one-node clusters (`eu`, `us`) leasing from it,
//! and per region a cell of agents leasing from their region — all with mutual TLS from a
//! freshly generated development PKI. The policy is applied once through the global admin
//! API; regions mirror it from the global watch stream and agents receive it from their
//! region's. Synthetic gateway traffic ([`traffic`]) is then offered above the policy's
//! rate, every admission is recorded, and at the end every window is checked against
//! `B + r·T` ([`summary`]).

pub mod agents;
pub mod config;
pub mod error;
pub mod nodes;
pub mod scrape;
pub mod stack;
pub mod summary;
pub mod tally;
pub mod traffic;

pub use config::{LiveConfig, POLICY_ID, REGIONS};
pub use error::LiveError;
pub use summary::{Snapshot, Summary};

use leasehold_common::rate::Rate;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use stack::Stack;
use std::time::{Duration, Instant};
use tally::Tally;
use traffic::Demand;

/// Starts the hierarchy, drives traffic for `cfg.duration_ms`, stops everything and
/// returns the summary. `on_progress` is called every `cfg.progress_every_ms`.
pub async fn run(
    cfg: &LiveConfig,
    mut on_progress: impl FnMut(&Snapshot),
) -> Result<Summary, LiveError> {
    cfg.validate()?;
    let rate = cfg.rate()?;
    let stack = Stack::start(cfg).await?;
    let (tally, elapsed_ns) = drive(cfg, rate, &stack, &mut on_progress).await;
    let allocators = stack.stop().await?;
    Ok(summary::summarise(
        cfg, rate, &tally, elapsed_ns, allocators,
    ))
}

/// Offers the requests as they come due, tick by tick, and records the answers.
async fn drive(
    cfg: &LiveConfig,
    rate: Rate,
    stack: &Stack,
    on_progress: &mut impl FnMut(&Snapshot),
) -> (Tally, u64) {
    let duration_ns = cfg.duration_ms * 1_000_000;
    let demand = Demand::new(cfg, REGIONS.len());
    let mut tally = Tally::new(
        REGIONS.len(),
        cfg.agents_per_region,
        cfg.tenants,
        duration_ns,
    );
    let tenants: Vec<String> = (0..cfg.tenants).map(LiveConfig::tenant_name).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let progress_ns = cfg.progress_every_ms * 1_000_000;
    let mut next_progress = progress_ns;
    let mut sent = 0u64;
    let started = Instant::now();
    loop {
        let now = (started.elapsed().as_nanos() as u64).min(duration_ns);
        let due = demand.due(now);
        while sent < due {
            let p = demand.pick(now, &mut rng);
            let agent = &stack.agents[p.region][p.agent];
            let admitted = agent.admit(POLICY_ID, &tenants[p.tenant]);
            // Timed after the answer: an admission is never placed earlier than it was made.
            let at = started.elapsed().as_nanos() as u64;
            tally.record(p.region, p.agent, p.tenant, at, admitted);
            sent += 1;
        }
        if now >= next_progress {
            on_progress(&summary::snapshot(cfg, rate, &tally, now));
            next_progress += progress_ns;
        }
        if now >= duration_ns {
            let elapsed = started.elapsed().as_nanos() as u64;
            return (tally, elapsed);
        }
        tokio::time::sleep(Duration::from_millis(cfg.tick_ms)).await;
    }
}
