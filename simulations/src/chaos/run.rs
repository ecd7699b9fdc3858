//! A chaos run: the cluster and agents started, traffic offered above the rate, faults
//! drawn from the seed one after another (each held, healed, then given time to settle),
//! and at the end the checks of [`super::verdict`].

use super::agents::{Agent, AgentSpec, NetnsPlace};
use super::cluster::{ProcCluster, ADMIN_NAME};
use super::error::ChaosError;
use super::faults::{draw, heal, inject, Fault, World};
use super::isolate::{NodeIsolation, ISOLATED_UID};
use super::netns::{self, Netns};
use super::node_config::{ClusterSpec, REGION_CLUSTER, ROOT_CLUSTER};
use super::procs::{Binaries, WorkDir};
use super::traffic::Generator;
use super::verdict::{verdict, Verdict};
use leasehold_proto::transport::{DevPki, PkiSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// The policy under test.
pub const POLICY_ID: &str = "api";
/// The allocator node whose wall clock is faked when libfaketime is installed.
const FAKETIME_NODE: u64 = 3;
/// The allocator node that can be cut off when iptables can be used.
const ISOLATABLE_NODE: u64 = 2;

/// Where Debian and Ubuntu install libfaketime.
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// Longest wait for the cluster to form or heal, in milliseconds.
const HEAL_WAIT_MS: u64 = 30_000;

#[derive(Clone, Debug)]
pub struct ChaosConfig {
    pub seed: u64,
    /// How long traffic and faults run, in seconds.
    pub duration_s: u64,
    pub agents: usize,
    pub tenants: usize,
    pub rate_per_sec: u64,
    pub burst: u64,
    /// Admits offered to each agent per second, spread over the tenants.
    pub offered_per_agent_per_sec: u64,
    /// Nodes of the region cluster leasing from the root; 0 runs without a region.
    pub region_nodes: u64,
    /// How many agents (the first ones) lease from the region rather than the root.
    pub region_agents: usize,
    /// How long a fault is held, in milliseconds (drawn up to this).
    pub fault_hold_max_ms: u64,
    /// Quiet time after a fault is healed, in milliseconds (drawn up to this).
    pub settle_max_ms: u64,
    /// Most faults injected in one run.
    pub faults_max: usize,
    pub work_dir: Option<PathBuf>,
}

impl Default for ChaosConfig {
    fn default() -> Self {
        ChaosConfig {
            seed: 1,
            duration_s: 60,
            agents: 5,
            tenants: 2,
            rate_per_sec: 100,
            burst: 200,
            offered_per_agent_per_sec: 60,
            region_nodes: 3,
            region_agents: 2,
            fault_hold_max_ms: 4_000,
            settle_max_ms: 3_000,
            faults_max: 10_000,
            work_dir: None,
        }
    }
}

impl ChaosConfig {
    /// A refresh horizon of `burst / (2·rate)` serves the whole rate (operations.md); the
    /// lease outlives a failover and most held faults.
    pub fn policy_yaml(&self) -> String {
        let horizon_ms = self.burst * 1_000 / (2 * self.rate_per_sec);
        format!(
            "id: {POLICY_ID}\ndimensions: [{{name: tenant}}]\nkey: [tenant]\nrate: {{units: {r}, per: 1s}}\n\
             burst: {b}\nscope: global\nlease: {{ttl: 10s, refresh_horizon: {horizon_ms}ms, reserve_fraction: 0}}\n",
            r = self.rate_per_sec,
            b = self.burst,
        )
    }
}

/// One injected fault and the longest fleet-wide stretch without an admission from its
/// injection until the next one.
#[derive(Clone, Debug, Serialize)]
pub struct FaultRecord {
    pub at_ms: u64,
    pub fault: Fault,
    pub hold_ms: u64,
    pub stall_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    pub duration_ms: u64,
    /// Parts of the suite that did not run here, and why.
    pub skipped: Vec<String>,
    pub faults: Vec<FaultRecord>,
    pub verdict: Verdict,
}

fn agent_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("gw-{i}")).collect()
}

/// The names of every allocator node the PKI must certify.
fn allocator_names(cfg: &ChaosConfig) -> Vec<String> {
    let root = ClusterSpec::default();
    let region = region_spec(cfg, Vec::new(), String::new());
    let mut names: Vec<String> = (1..=root.nodes).map(|id| root.node_name(id)).collect();
    names.extend((1..=region.nodes).map(|id| region.node_name(id)));
    names
}

/// The region cluster leasing from `upstream`, listening where the root does.
fn region_spec(cfg: &ChaosConfig, upstream: Vec<String>, listen_ip: String) -> ClusterSpec {
    ClusterSpec {
        name: REGION_CLUSTER.into(),
        nodes: cfg.region_nodes,
        upstream,
        listen_ip,
        ..ClusterSpec::default()
    }
}

/// Starts the root cluster, the region (when configured) and the agents: the first
/// `region_agents` lease from the region, the rest from the root; every other agent keeps a
/// state file, the last runs in its own namespace when it can, the one before and the third
/// root node under libfaketime when installed; the second root node runs as a user of its
/// own when iptables can cut it off.
async fn start_world(
    dir: &std::path::Path,
    bins: &Binaries,
    cfg: &ChaosConfig,
    skipped: &mut Vec<String>,
) -> Result<World, ChaosError> {
    let firewall = netns::unavailable();
    let netns = match &firewall {
        None => Some(Netns::create()?),
        Some(why) => {
            skipped.push(format!("network-namespace agent and partition: {why}"));
            None
        }
    };
    if let Some(why) = &firewall {
        skipped.push(format!("partition of an allocator node: {why}"));
    }
    let faketime = std::path::Path::new(FAKETIME_LIB).is_file();
    if !faketime {
        skipped.push(format!(
            "clock steps: libfaketime not found at {FAKETIME_LIB}"
        ));
    }
    let names = agent_names(cfg.agents);
    let names_ref: Vec<&str> = names.iter().map(String::as_str).collect();
    let allocators = allocator_names(cfg);
    let allocators_ref: Vec<&str> = allocators.iter().map(String::as_str).collect();
    let mut pki_spec = PkiSpec::local(&allocators_ref, &names_ref, &[ADMIN_NAME]);
    if let Some(ns) = &netns {
        pki_spec.hosts.push(ns.host_ip.clone());
    }
    let pki = DevPki::generate(&pki_spec, SystemTime::now())
        .map_err(|e| ChaosError::Pki(e.to_string()))?;
    pki.write_to(&dir.join("certs"), true)
        .map_err(|e| ChaosError::Pki(e.to_string()))?;
    let listen_ip = netns
        .as_ref()
        .map_or("127.0.0.1".into(), |ns| ns.host_ip.clone());
    let spec = ClusterSpec {
        name: ROOT_CLUSTER.into(),
        listen_ip: listen_ip.clone(),
        // The third node's wall clock is faked, whichever role it has when stepped.
        faketime: faketime.then(|| (FAKETIME_LIB.into(), FAKETIME_NODE)),
        // The second runs as a user of its own, so that iptables can cut it off.
        isolatable: firewall
            .is_none()
            .then_some((ISOLATABLE_NODE, ISOLATED_UID)),
        ..ClusterSpec::default()
    };
    let cluster = ProcCluster::start(dir, bins, &pki, &spec)?;
    cluster.wait_healthy(HEAL_WAIT_MS).await?;
    cluster
        .apply_policy(&cfg.policy_yaml(), HEAL_WAIT_MS)
        .await?;
    let region = if cfg.region_nodes > 0 {
        let spec = region_spec(cfg, cluster.addrs(), listen_ip);
        let region = ProcCluster::start(dir, bins, &pki, &spec)?;
        region.wait_healthy(HEAL_WAIT_MS).await?;
        Some(region)
    } else {
        None
    };
    let last = cfg.agents - 1;
    let netns_agent = netns.as_ref().map(|_| last);
    let faketime_agent = (faketime && cfg.agents >= 2).then_some(last - 1);
    let mut agents = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let place = netns
            .as_ref()
            .filter(|_| netns_agent == Some(i))
            .map(|ns| NetnsPlace {
                name: ns.name.clone(),
                agent_ip: ns.agent_ip.clone(),
            });
        let spec = AgentSpec {
            name: name.clone(),
            state_file: i % 2 == 0,
            netns: place,
            faketime_lib: (faketime_agent == Some(i)).then(|| FAKETIME_LIB.into()),
        };
        let upstream = match &region {
            Some(region) if i < cfg.region_agents => region,
            _ => &cluster,
        };
        let mut agent = Agent::new(dir, spec, &upstream.addrs())?;
        agent.launch(bins)?;
        agents.push(agent);
    }
    let isolatable = spec.isolatable.and_then(|(node, uid)| {
        let port = cluster.node(node).grpc_port()?;
        Some((node, NodeIsolation::new(uid, port)))
    });
    Ok(World {
        bins: bins.clone(),
        cluster,
        region,
        region_agents: if cfg.region_nodes > 0 {
            cfg.region_agents.min(cfg.agents)
        } else {
            0
        },
        agents,
        netns,
        netns_agent,
        faketime_agent,
        isolatable,
    })
}

/// Runs the suite; `on_fault` sees each fault once its stall is known.
pub async fn run_chaos(
    bins: &Binaries,
    cfg: &ChaosConfig,
    mut on_fault: impl FnMut(&FaultRecord),
) -> Result<ChaosReport, ChaosError> {
    if cfg.region_nodes > 0 && cfg.region_agents > cfg.agents {
        return Err(ChaosError::InvalidConfig {
            field: "region_agents",
            reason: format!(
                "{} region agents of {} agents",
                cfg.region_agents, cfg.agents
            ),
        });
    }
    if cfg.agents < 2 || cfg.tenants == 0 || cfg.rate_per_sec == 0 {
        return Err(ChaosError::InvalidConfig {
            field: "agents/tenants/rate_per_sec",
            reason: "at least 2 agents, 1 tenant and a positive rate".into(),
        });
    }
    let work = WorkDir::new(cfg.work_dir.as_deref())?;
    let mut skipped = Vec::new();
    let mut world = start_world(work.path(), bins, cfg, &mut skipped).await?;
    let addrs: Vec<_> = world.agents.iter().map(|a| a.http).collect();
    let traffic = Generator::start(
        &addrs,
        POLICY_ID,
        cfg.tenants,
        cfg.offered_per_agent_per_sec,
        cfg.seed,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let started = Instant::now();
    let end = Duration::from_secs(cfg.duration_s);
    let mut faults = Vec::new();
    let first_pause = rng.random_range(500..=cfg.settle_max_ms.max(500));
    tokio::time::sleep(Duration::from_millis(first_pause)).await;
    while started.elapsed() < end && faults.len() < cfg.faults_max {
        let leader = world.cluster.wait_healthy(HEAL_WAIT_MS).await?;
        let region_leader = match &world.region {
            Some(region) => Some(region.wait_healthy(HEAL_WAIT_MS).await?),
            None => None,
        };
        let fault = draw(&mut rng, &world, leader, region_leader);
        let hold_ms = rng.random_range(500..=cfg.fault_hold_max_ms.max(500));
        let at_ns = traffic.elapsed_ns();
        inject(&mut world, &fault)?;
        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
        heal(&mut world, &fault)?;
        for cluster in std::iter::once(&mut world.cluster).chain(world.region.as_mut()) {
            if let Some((id, why)) = cluster.crashed() {
                return Err(ChaosError::process(cluster.node_name(id), why));
            }
        }
        let settle = rng.random_range(500..=cfg.settle_max_ms.max(500));
        tokio::time::sleep(Duration::from_millis(settle)).await;
        let record = FaultRecord {
            at_ms: at_ns / 1_000_000,
            fault,
            hold_ms,
            stall_ms: traffic.fleet_gap_ns(at_ns) / 1_000_000,
        };
        on_fault(&record);
        faults.push(record);
    }
    let records = traffic.stop();
    let verdict = verdict(&mut world, cfg, &records).await?;
    Ok(ChaosReport {
        seed: cfg.seed,
        duration_ms: started.elapsed().as_millis() as u64,
        skipped,
        faults,
        verdict,
    })
}
