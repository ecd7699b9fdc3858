//! Starting and stopping the whole hierarchy: PKI, the global cluster, the regions and
//! their cells of agents, in this process on loopback.

use super::agents::LiveAgent;
use super::config::{LiveConfig, GLOBAL_NODES, POLICY_ID, REGIONS};
use super::error::LiveError;
use super::nodes::{
    admin, channels, eventually, free_port, signing_key_path, start_node, NodeHandle, NodeSpec,
};
use super::scrape::{fetch_metrics, parse_figures, ClusterFigures};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{ChannelFactory, DevPki, PkiSpec, Role};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// How long each start-up stage may take (elections, policy propagation).
const SETUP_WAIT_MS: u64 = 30_000;
const ADMIN_NAME: &str = "demo-operator";

/// The running hierarchy.
pub struct Stack {
    /// Data directories, keys and certificates; removed when the stack is dropped.
    _dir: tempfile::TempDir,
    global: Vec<NodeHandle>,
    regions: Vec<NodeHandle>,
    /// `agents[region][i]`.
    pub agents: Vec<Vec<LiveAgent>>,
}

fn pki_spec(cfg: &LiveConfig) -> PkiSpec {
    let mut allocators: Vec<String> = (1..=GLOBAL_NODES).map(|i| format!("global-{i}")).collect();
    allocators.extend(REGIONS.iter().map(|r| format!("{r}-1")));
    let agents: Vec<String> = REGIONS
        .iter()
        .flat_map(|r| (0..cfg.agents_per_region).map(move |i| LiveConfig::agent_name(r, i)))
        .collect();
    fn names(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    PkiSpec::local(&names(&allocators), &names(&agents), &[ADMIN_NAME])
}

fn public_key_hex(dir: &std::path::Path, cluster: &str) -> Result<String, LiveError> {
    let signer = leasehold_allocator::server::signing_key(&signing_key_path(dir, cluster))
        .map_err(|e| LiveError::Node {
            node: cluster.to_string(),
            reason: e.to_string(),
        })?;
    Ok(hex::encode(signer.public_key()))
}

impl Stack {
    /// Starts everything and waits until every agent has the policy.
    pub async fn start(cfg: &LiveConfig) -> Result<Stack, LiveError> {
        let dir = tempfile::tempdir().map_err(LiveError::TempDir)?;
        let pki = DevPki::generate(&pki_spec(cfg), SystemTime::now())
            .map_err(|e| LiveError::Pki(e.to_string()))?;
        pki.write_to(&dir.path().join("certs"), true)
            .map_err(|e| LiveError::Pki(e.to_string()))?;
        let ops = channels(&pki, Role::Admin, ADMIN_NAME)?;

        let global_key = public_key_hex(dir.path(), "global")?;
        let members: Vec<(u64, u16)> = (1..=GLOBAL_NODES)
            .map(|id| free_port().map(|p| (id, p)))
            .collect::<Result<_, _>>()?;
        let mut global = Vec::new();
        for &(id, _) in &members {
            let spec = NodeSpec {
                cluster: "global",
                node_id: id,
                members: &members,
                http_port: free_port()?,
                upstream: None,
            };
            global.push(start_node(dir.path(), &spec)?);
        }
        apply_policy(&ops, &global, &cfg.policy_yaml()).await?;

        let upstream: Vec<String> = global.iter().map(|n| n.grpc_addr.clone()).collect();
        let mut regions = Vec::new();
        for region in REGIONS {
            let spec = NodeSpec {
                cluster: region,
                node_id: 1,
                members: &[(1, free_port()?)],
                http_port: free_port()?,
                upstream: Some((&upstream, &global_key)),
            };
            regions.push(start_node(dir.path(), &spec)?);
        }
        for node in &regions {
            wait_for_policy(&ops, node).await?;
        }

        let mut agents = Vec::new();
        for (region, node) in REGIONS.iter().zip(&regions) {
            let cell = (0..cfg.agents_per_region)
                .map(|i| {
                    LiveAgent::start(&pki, &LiveConfig::agent_name(region, i), &node.grpc_addr)
                })
                .collect::<Result<Vec<_>, _>>()?;
            agents.push(cell);
        }
        let stack = Stack {
            _dir: dir,
            global,
            regions,
            agents,
        };
        eventually(SETUP_WAIT_MS, "every agent to receive the policy", || {
            let ready = stack
                .agents
                .iter()
                .flatten()
                .all(|a| a.has_policy(POLICY_ID));
            async move { Ok(ready) }
        })
        .await?;
        Ok(stack)
    }

    /// Stops the agents (they release their leases), reads each cluster's ledger figures
    /// for the policy, then stops the regions and the global cluster.
    pub async fn stop(self) -> Result<BTreeMap<String, ClusterFigures>, LiveError> {
        let mut first_error = None;
        for agent in self.agents.into_iter().flatten() {
            if let Err(e) = agent.stop().await {
                first_error.get_or_insert(e);
            }
        }
        let mut figures = BTreeMap::new();
        for node in self.global.iter().chain(&self.regions) {
            let page = fetch_metrics(&node.name, &node.http_addr).await?;
            let f = parse_figures(&page, POLICY_ID);
            let entry: &mut ClusterFigures = figures.entry(node.cluster.clone()).or_default();
            *entry = entry.furthest(f);
        }
        for node in self.regions.into_iter().chain(self.global) {
            if let Err(e) = node.stop().await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(figures),
        }
    }
}

/// Applies the policy through whichever global node takes it (the leader, once elected).
async fn apply_policy(
    ops: &ChannelFactory,
    global: &[NodeHandle],
    yaml: &str,
) -> Result<(), LiveError> {
    eventually(
        SETUP_WAIT_MS,
        "the global cluster to accept the policy",
        || async {
            for node in global {
                node.check_alive()?;
                let req = pb::ApplyPolicyRequest {
                    yaml: yaml.to_string(),
                    ..Default::default()
                };
                if admin(ops, &node.grpc_addr)?.apply_policy(req).await.is_ok() {
                    return Ok(true);
                }
            }
            Ok(false)
        },
    )
    .await
}

/// Waits until a region has mirrored the policy from the global cluster's watch stream.
async fn wait_for_policy(ops: &ChannelFactory, node: &NodeHandle) -> Result<(), LiveError> {
    let what = format!("region {} to mirror the policy", node.cluster);
    eventually(SETUP_WAIT_MS, &what, || async {
        node.check_alive()?;
        let req = pb::GetPolicyRequest {
            policy_id: POLICY_ID.into(),
            ..Default::default()
        };
        Ok(admin(ops, &node.grpc_addr)?.get_policy(req).await.is_ok())
    })
    .await
}
