//! A root under many regions: `regions` delegated allocators, `keys` active keys and
//! `agents` agents in one process on tokio's paused clock, the root and every region the
//! production allocator state and upstream driver (`LocalReplica`, `run_upstream`), the
//! lease service's answers given in process ([`ReplicaGrantor`], leases unsigned). It
//! measures what the root's Raft group would have to carry: commands and bytes proposed
//! per second, the calls behind them, and the state it holds, against the seed's §9 model.
//!
//! A key belongs to one agent, an agent to one region: each key is one upstream lease at
//! the root. Each key's demand is drawn from the seed.

mod agents;
mod meter;

use agents::{Agent, AgentTally, KeyLoad, POLICY_ID};
use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::service::ticker::run_ticker;
use leasehold_allocator::service::ReplicaGrantor;
use leasehold_allocator::state::{AllocatorState, StateCommand};
use leasehold_allocator::upstream::plan::PlanSettings;
use leasehold_allocator::upstream::{run_upstream, UpstreamConfig, UpstreamCounters};
use leasehold_client::Grantor;
use leasehold_common::ledger::{LedgerConfig, LedgerLimits};
use leasehold_common::time::{Clock, Nanos};
use meter::{Counts, Meter, Metered};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

pub const REGIONS_MAX: usize = 1_000;
pub const KEYS_MAX: usize = 5_000_000;
pub const AGENTS_MAX: usize = 100_000;
pub const SECONDS_MAX: u64 = 600;

/// A scale run.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleConfig {
    pub regions: usize,
    pub keys: usize,
    pub agents: usize,
    /// Simulated seconds measured, after the warm-up.
    pub seconds: u64,
    /// Simulated seconds before measuring: every key acquired, every lease renewed once.
    pub warmup_s: u64,
    pub seed: u64,
    /// How often a region reports on (and renews) each key upstream.
    pub region_report_every_ms: u64,
    /// How often an agent reports on its keys.
    pub agent_report_every_ms: u64,
    /// A key's demand is drawn between these, in units per second.
    pub demand_min: u64,
    pub demand_max: u64,
}

impl Default for ScaleConfig {
    fn default() -> Self {
        ScaleConfig {
            regions: 100,
            keys: 1_000_000,
            agents: 10_000,
            seconds: 4,
            warmup_s: 3,
            seed: 1,
            region_report_every_ms: 500,
            agent_report_every_ms: 500,
            demand_min: 1,
            demand_max: 20,
        }
    }
}

impl ScaleConfig {
    pub fn validate(&self) -> Result<(), String> {
        let checks = [
            ("regions", self.regions as u64, 1, REGIONS_MAX as u64),
            ("keys", self.keys as u64, 1, KEYS_MAX as u64),
            (
                "agents",
                self.agents as u64,
                self.regions as u64,
                AGENTS_MAX as u64,
            ),
            ("seconds", self.seconds, 1, SECONDS_MAX),
            ("demand_min", self.demand_min, 1, self.demand_max),
        ];
        for (name, v, lo, hi) in checks {
            if v < lo || v > hi {
                return Err(format!("{name}: {v} is outside {lo}..={hi}"));
            }
        }
        Ok(())
    }
}

/// What a scale run measured, per simulated second over the measured seconds.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleReport {
    pub config: ScaleConfig,
    /// Commands proposed to the root (a `LeaseBatch` is one).
    pub root_commands_per_s: f64,
    /// Acquires, reports and releases the root applied, inside batches or not.
    pub root_lease_calls_per_s: f64,
    /// `LeaseBatch` commands among them.
    pub root_batches_per_s: f64,
    /// Encoded bytes of the proposed commands: appended at the leader and sent to each
    /// follower.
    pub root_bytes_per_s: f64,
    /// Wall time the root's state machine took per applied lease call, on this machine.
    pub root_apply_ns_per_call: f64,
    /// Units the agents admitted.
    pub admitted_units_per_s: f64,
    /// The keys' demand summed: what the agents would admit with credit always at hand.
    pub demand_units_per_s: f64,
    /// Credit the root granted per lease call that granted any.
    pub root_lease_size_mean: f64,
    /// §9: admitted units/s ÷ mean lease size.
    pub model_calls_per_s: f64,
    /// A region reports on each of its keys once per interval: keys ÷ interval. An upper
    /// bound: a key is reported at the first round that finds its last report an interval
    /// old, so its reports come a little further apart.
    pub model_refresh_calls_per_s: f64,
    /// Regions × their rounds per second × the batches one round needs (a round takes at
    /// most `keys_per_round_max` keys, 1 024 to a batch): what the root's commands from
    /// regions are bounded by, whatever the keys.
    pub model_batches_per_s_max: f64,
    pub root_keys: usize,
    pub root_leases: usize,
    /// The root state's snapshot encoding.
    pub root_snapshot_bytes: usize,
    /// The agents' calls to their regions.
    pub agent_calls_per_s: f64,
    pub agent_batches_per_s: f64,
    /// Region driver counters summed: reports upstream and batches sent, per second.
    pub region_reports_per_s: f64,
    pub region_batch_calls_per_s: f64,
    pub root_conserved: bool,
}

/// Tokio's clock (paused in a scale run) as the ledgers' clock.
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now(&self) -> Nanos {
        Nanos(1_000_000_000 + self.0.elapsed().as_nanos() as u64)
    }
}

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100000, per: 1s}\nburst: 100000\nscope: global\nlease: {ttl: 5s, refresh_horizon: 1s, reserve_fraction: 0}\n";
/// The driver's and the tickers' period.
const TICK_MS: u64 = 50;

fn limits(keys: usize) -> LedgerLimits {
    let mut l = LedgerLimits::default();
    l.keys_max = l.keys_max.max(keys * 2);
    l.leases_max = l.leases_max.max(keys * 4);
    l
}

/// Runs `cfg` on a current-thread runtime with a paused clock.
pub fn run(cfg: &ScaleConfig) -> Result<ScaleReport, String> {
    cfg.validate()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run_paused(cfg.clone()))
}

/// Root-side totals at one instant.
#[derive(Clone, Copy, Default)]
struct Totals {
    counts: Counts,
    granted: u64,
    admitted: u64,
    agent_calls: u64,
    agent_batches: u64,
    region_reports: u64,
    region_batches: u64,
}

struct World {
    root: Metered,
    tally: Arc<AgentTally>,
    regions: Vec<Arc<UpstreamCounters>>,
    /// The keys' demand summed, in units per second.
    demand_units_per_s: f64,
}

impl World {
    async fn totals(&self) -> Totals {
        let granted = self
            .root
            .read(|s| {
                leasehold_allocator::metrics::ledger_figures(s.ledger())
                    .get(POLICY_ID)
                    .map_or(0, |f| f.granted)
            })
            .await
            .unwrap_or(0);
        Totals {
            counts: self.root.meter.counts(),
            granted,
            admitted: self.tally.admitted.load(Relaxed),
            agent_calls: self.tally.calls.load(Relaxed),
            agent_batches: self.tally.batches.load(Relaxed),
            region_reports: self.regions.iter().map(|c| c.reports.load(Relaxed)).sum(),
            region_batches: self
                .regions
                .iter()
                .map(|c| c.batch_calls.load(Relaxed))
                .sum(),
        }
    }
}

async fn run_paused(cfg: ScaleConfig) -> Result<ScaleReport, String> {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock(tokio::time::Instant::now()));
    let world = start(&cfg, clock).await?;
    tokio::time::sleep(Duration::from_secs(cfg.warmup_s)).await;
    let before = world.totals().await;
    tokio::time::sleep(Duration::from_secs(cfg.seconds)).await;
    let after = world.totals().await;
    let (root_keys, root_leases, root_snapshot_bytes, root_conserved) = world
        .root
        .read(|s| {
            let l = s.ledger();
            let bytes = postcard::to_allocvec(s).map_or(0, |b| b.len());
            (
                l.accounts().count(),
                l.leases().count(),
                bytes,
                l.conserved(),
            )
        })
        .await
        .map_err(|e| e.to_string())?;
    Ok(report(
        &cfg,
        (&before, &after, world.demand_units_per_s),
        (root_keys, root_leases, root_snapshot_bytes, root_conserved),
    ))
}

fn report(
    cfg: &ScaleConfig,
    (before, after, demand_units_per_s): (&Totals, &Totals, f64),
    (root_keys, root_leases, root_snapshot_bytes, root_conserved): (usize, usize, usize, bool),
) -> ScaleReport {
    let s = cfg.seconds as f64;
    let per_s = |a: u64, b: u64| (a - b) as f64 / s;
    let c = after.counts.since(&before.counts);
    let granted = after.granted - before.granted;
    let admitted = per_s(after.admitted, before.admitted);
    let lease_size = granted as f64 / c.lease_calls.max(1) as f64;
    ScaleReport {
        config: cfg.clone(),
        root_commands_per_s: c.proposals as f64 / s,
        root_lease_calls_per_s: c.lease_calls as f64 / s,
        root_batches_per_s: c.batches as f64 / s,
        root_bytes_per_s: c.bytes as f64 / s,
        root_apply_ns_per_call: c.apply_ns as f64 / c.lease_calls.max(1) as f64,
        admitted_units_per_s: admitted,
        demand_units_per_s,
        root_lease_size_mean: lease_size,
        model_calls_per_s: admitted / lease_size.max(f64::MIN_POSITIVE),
        model_refresh_calls_per_s: cfg.keys as f64 * 1_000.0 / cfg.region_report_every_ms as f64,
        model_batches_per_s_max: batches_per_s_max(cfg),
        root_keys,
        root_leases,
        root_snapshot_bytes,
        agent_calls_per_s: per_s(after.agent_calls, before.agent_calls),
        agent_batches_per_s: per_s(after.agent_batches, before.agent_batches),
        region_reports_per_s: per_s(after.region_reports, before.region_reports),
        region_batch_calls_per_s: per_s(after.region_batches, before.region_batches),
        root_conserved,
    }
}

/// The root, the regions with their drivers, and the agents, all started.
async fn start(cfg: &ScaleConfig, clock: Arc<dyn Clock>) -> Result<World, String> {
    let never = std::future::pending::<()>;
    let mut root_cfg = LedgerConfig::root("global");
    root_cfg.limits = limits(cfg.keys);
    let root = Metered {
        inner: LocalReplica::new(AllocatorState::new(root_cfg), Arc::clone(&clock)),
        meter: Arc::new(Meter::default()),
    };
    let apply = StateCommand::ApplyPolicy {
        yaml: POLICY.into(),
        shadow: false,
        effective_at_ns: 0,
        actor: "scale".into(),
    };
    root.propose(apply).await.map_err(|e| e.to_string())?;
    tokio::task::spawn_local(run_ticker(root.clone(), TICK_MS * 2, never()));
    let up: Arc<dyn Grantor> = Arc::new(ReplicaGrantor::new(root.clone(), None));
    let mut regions = Vec::with_capacity(cfg.regions);
    let mut grantors: Vec<Arc<dyn Grantor>> = Vec::with_capacity(cfg.regions);
    for r in 0..cfg.regions {
        let name = format!("r{r}");
        let mut lc = LedgerConfig::delegated(name.clone());
        lc.limits = limits(cfg.keys);
        let replica = LocalReplica::new(AllocatorState::new(lc), Arc::clone(&clock));
        let mirror = StateCommand::MirrorPolicy {
            yaml: POLICY.into(),
            upstream_version: 1,
            actor: "scale".into(),
        };
        replica.propose(mirror).await.map_err(|e| e.to_string())?;
        tokio::task::spawn_local(run_ticker(replica.clone(), TICK_MS * 2, never()));
        let mut driver = UpstreamConfig::new(&name);
        driver.tick_ms = TICK_MS;
        driver.plan.report_every_ms = cfg.region_report_every_ms;
        let counters = Arc::new(UpstreamCounters::default());
        let run = run_upstream(
            replica.clone(),
            Arc::clone(&up),
            None,
            driver,
            Arc::clone(&counters),
            never(),
        );
        tokio::task::spawn_local(run);
        regions.push(counters);
        grantors.push(Arc::new(ReplicaGrantor::new(replica, None)));
    }
    let tally = Arc::new(AgentTally::default());
    let agents = agents(cfg);
    let demand_milli: u64 = agents
        .iter()
        .flat_map(|a| a.keys.iter().map(|k| k.demand_milli_per_sec))
        .sum();
    for (a, agent) in agents.into_iter().enumerate() {
        let region = Arc::clone(&grantors[a % cfg.regions]);
        tokio::task::spawn_local(agent.run(region, Arc::clone(&tally)));
    }
    Ok(World {
        root,
        tally,
        regions,
        demand_units_per_s: demand_milli as f64 / 1_000.0,
    })
}

fn batches_per_s_max(cfg: &ScaleConfig) -> f64 {
    let per_region = cfg.keys.div_ceil(cfg.regions);
    let per_round = per_region.min(PlanSettings::default().keys_per_round_max);
    let batches = per_round.div_ceil(leasehold_client::LEASE_BATCH_ITEMS_MAX);
    (cfg.regions * batches) as f64 * 1_000.0 / TICK_MS as f64
}

/// The agents and their keys, drawn from the seed: key `k` is served by agent
/// `k % agents`, with a demand between `demand_min` and `demand_max` units/s.
fn agents(cfg: &ScaleConfig) -> Vec<Agent> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut out: Vec<Agent> = (0..cfg.agents)
        .map(|a| Agent {
            holder_id: format!("gw-{a}"),
            keys: Vec::with_capacity(cfg.keys / cfg.agents + 1),
            report_every_ms: cfg.agent_report_every_ms,
            horizon_ms: 1_000,
            phase_ms: rng.random_range(0..cfg.agent_report_every_ms),
        })
        .collect();
    for k in 0..cfg.keys {
        let demand = rng.random_range(cfg.demand_min..=cfg.demand_max);
        out[k % cfg.agents].keys.push(KeyLoad {
            key: format!("api:tenant=t{k:07}"),
            demand_milli_per_sec: demand * 1_000,
        });
    }
    out
}
