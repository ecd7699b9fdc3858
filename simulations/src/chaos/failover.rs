//! Failover measured on the real binaries: the leader of a 3-node cluster is killed with
//! SIGKILL again and again; each time, how long until a write commits on a new leader, and
//! whether a holder whose lease covers that time ever stops admitting.

use super::agents::{Agent, AgentSpec};
use super::cluster::{ProcCluster, ADMIN_NAME};
use super::error::ChaosError;
use super::node_config::ClusterSpec;
use super::probe::{start_probe, PROBE_HOLDER, PROBE_POLICY_YAML};
use super::procs::Binaries;
use super::traffic::{longest_gap_ns, Counts, Generator};
use leasehold_proto::transport::{DevPki, PkiSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::{Duration, Instant, SystemTime};

/// The holder's policy: its lease (15 s) and refresh horizon (3 s of demand) cover an
/// election several times over; the burst is twice a horizon's demand so it is served in
/// full (operations.md, "Sizing leases").
pub const HOLDER_POLICY_YAML: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100, per: 1s}\nburst: 400\nscope: global\nlease: {ttl: 15s, refresh_horizon: 3s, reserve_fraction: 0}\n";
const HOLDER_NAME: &str = "holder";
/// The holder's demand: half the policy's rate, so a denial can only mean a gap in credit.
const HOLDER_OFFERED_PER_SEC: u64 = 50;
/// Longest wait for the first write after a kill before the sample counts as this long,
/// in milliseconds.
const SERVE_WAIT_MS: u64 = 15_000;
/// Longest wait for the cluster to form or heal, in milliseconds.
const HEAL_WAIT_MS: u64 = 30_000;

#[derive(Clone, Debug)]
pub struct FailoverConfig {
    pub kills: usize,
    pub seed: u64,
    /// The nodes' `raft:` mapping; None measures the product defaults.
    pub raft_yaml: Option<String>,
    /// Where configs, data and logs go (kept); None: a temporary directory, removed.
    pub work_dir: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FailoverReport {
    /// Per kill: from SIGKILL of the leader to the first write committed after it, in ms.
    pub samples_ms: Vec<u64>,
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
    /// The holder's traffic over all kills.
    pub holder: Counts,
    /// The holder's denials from the first kill on (its demand is half the rate, so any
    /// denial is a gap in credit).
    pub holder_denied_during_kills: u64,
    /// The holder's longest stretch without an admission from the first kill on, in ms.
    pub holder_gap_max_ms: u64,
}

/// The `q`-quantile (0..=1) of `sorted`, nearest rank.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One kill, as [`run_failover`] reports it when the write after it has committed.
#[derive(Clone, Copy, Debug)]
pub struct Kill {
    /// 0 for the first kill.
    pub index: usize,
    /// The node killed, the leader at the time.
    pub leader: u64,
    /// When the SIGKILL was sent, on the wall clock, to find the kill in the nodes' logs.
    pub at: SystemTime,
    /// From the kill to the first write committed after it, in milliseconds.
    pub served_ms: u64,
}

/// Runs the measurement in a fresh directory under the system's temporary directory.
pub async fn run_failover(
    bins: &Binaries,
    cfg: &FailoverConfig,
    mut on_kill: impl FnMut(&Kill),
) -> Result<FailoverReport, ChaosError> {
    let tmp = super::procs::WorkDir::new(cfg.work_dir.as_deref())?;
    let dir = tmp.path();
    let spec = PkiSpec::local(
        &["global-1", "global-2", "global-3"],
        &[PROBE_HOLDER, HOLDER_NAME],
        &[ADMIN_NAME],
    );
    let pki =
        DevPki::generate(&spec, SystemTime::now()).map_err(|e| ChaosError::Pki(e.to_string()))?;
    pki.write_to(&dir.join("certs"), true)
        .map_err(|e| ChaosError::Pki(e.to_string()))?;
    let spec = ClusterSpec {
        raft_yaml: cfg.raft_yaml.clone(),
        ..ClusterSpec::default()
    };
    let mut cluster = ProcCluster::start(dir, bins, &pki, &spec)?;
    cluster.wait_healthy(HEAL_WAIT_MS).await?;
    cluster
        .apply_policy(PROBE_POLICY_YAML, HEAL_WAIT_MS)
        .await?;
    cluster
        .apply_policy(HOLDER_POLICY_YAML, HEAL_WAIT_MS)
        .await?;
    let probe = start_probe(&pki, cluster.addrs())?;

    let holder_spec = AgentSpec {
        name: HOLDER_NAME.into(),
        ..AgentSpec::default()
    };
    let mut holder = Agent::new(dir, holder_spec, &cluster.addrs())?;
    holder.launch(bins)?;
    let traffic = Generator::start(&[holder.http], "api", 1, HOLDER_OFFERED_PER_SEC, cfg.seed);
    // The holder's first lease, sized from measured demand, before the first kill.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut samples = Vec::new();
    let first_kill_ns = traffic.elapsed_ns();
    for k in 0..cfg.kills {
        cluster.wait_healthy(HEAL_WAIT_MS).await?;
        // A random phase against the heartbeat and the holder's refreshes.
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1_300))).await;
        let Some(leader) = cluster.leader().await else {
            continue;
        };
        let (killed_at, at) = (Instant::now(), SystemTime::now());
        cluster.kill(leader);
        let served = wait_served(&probe, killed_at).await;
        let served_ms = served.as_millis() as u64;
        on_kill(&Kill {
            index: k,
            leader,
            at,
            served_ms,
        });
        samples.push(served_ms);
        cluster.launch(leader)?;
        if let Some((id, why)) = cluster.crashed() {
            return Err(ChaosError::process(cluster.node_name(id), why));
        }
    }
    probe.stop();
    let records = traffic.stop();
    drop(holder);
    let fleet = records.fleet_ns();
    let end_ns = records.started.elapsed().as_nanos() as u64;
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    Ok(FailoverReport {
        p50_ms: quantile(&sorted, 0.5),
        p90_ms: quantile(&sorted, 0.9),
        p99_ms: quantile(&sorted, 0.99),
        max_ms: sorted.last().copied().unwrap_or(0),
        samples_ms: samples,
        holder: records.counts,
        holder_denied_during_kills: records.agent_denied_ns[0]
            .iter()
            .filter(|&&t| t >= first_kill_ns)
            .count() as u64,
        holder_gap_max_ms: longest_gap_ns(&fleet, first_kill_ns, end_ns) / 1_000_000,
    })
}

async fn wait_served(probe: &super::probe::ProbeLog, killed_at: Instant) -> Duration {
    let limit = Duration::from_millis(SERVE_WAIT_MS);
    loop {
        if let Some(at) = probe.first_success_after(killed_at) {
            return at - killed_at;
        }
        if killed_at.elapsed() > limit {
            return limit;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
