//! An allocator cluster (the root, or a region leasing from it) of real
//! `leasehold-allocator` processes with mutual TLS from a development PKI: start, SIGKILL, SIGSTOP/SIGCONT and restart any node, find the
//! leader, and read each node's ledger figures from its `/metrics`.

use super::error::ChaosError;
use super::node_config::ClusterSpec;
use super::procs::{free_port, Binaries, Proc, Signal};
use crate::live::scrape::{fetch_metrics, parse_figures, ClusterFigures};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, DevPki, Role};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Identity of the operator the harness acts as.
pub const ADMIN_NAME: &str = "chaos";
/// How long a node may take to answer an admin call during a fault, in milliseconds.
const ADMIN_CALL_TIMEOUT_MS: u64 = 1_000;
/// How long a node may take to exit on SIGTERM before it is killed, in milliseconds.
const NODE_STOP_WAIT_MS: u64 = 10_000;
/// How long the first node may take to make the signing key, in milliseconds.
const KEY_WAIT_MS: u64 = 10_000;

/// Hands `dir` and everything in it to `uid` (as its group too).
fn chown_tree(dir: &Path, uid: u32) -> Result<(), ChaosError> {
    let out = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(dir)
        .output()
        .map_err(ChaosError::io("chown"))?;
    if !out.status.success() {
        return Err(ChaosError::process(
            "chown",
            String::from_utf8_lossy(&out.stderr).trim(),
        ));
    }
    Ok(())
}

fn wait_for_file(path: &Path, wait_ms: u64) -> Result<(), ChaosError> {
    let started = Instant::now();
    while !path.is_file() {
        if started.elapsed() > Duration::from_millis(wait_ms) {
            return Err(ChaosError::Timeout {
                what: path.display().to_string(),
                waited_ms: wait_ms,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// One allocator node: its identity, addresses and the process while it runs.
pub struct Node {
    pub id: u64,
    pub grpc_addr: String,
    pub http_addr: String,
    pub config: PathBuf,
    pub log: PathBuf,
    pub proc: Option<Proc>,
    /// SIGSTOPped and not yet continued.
    pub stopped: bool,
    /// libfaketime's library and the file its offset is read from, when this node's wall
    /// clock is faked.
    pub faketime: Option<(PathBuf, PathBuf)>,
    /// The user id this node runs as, when not the harness's own.
    pub uid: Option<u32>,
}

impl Node {
    /// The port of its gRPC listener (which also carries its Raft traffic).
    pub fn grpc_port(&self) -> Option<u16> {
        self.grpc_addr.rsplit_once(':')?.1.parse().ok()
    }
}

/// The cluster and the files it runs from.
pub struct ProcCluster {
    pub dir: PathBuf,
    pub nodes: Vec<Node>,
    /// The cluster's name, which prefixes its nodes' names.
    pub name: String,
    bins: Binaries,
    admin: ChannelFactory,
}

/// Client channels with `name`'s certificate; short timeouts so a stopped node costs a
/// caller at most a second.
pub fn channels(pki: &DevPki, role: Role, name: &str) -> Result<ChannelFactory, ChaosError> {
    let pem = pki
        .tls_pem(role, name)
        .ok_or_else(|| ChaosError::Pki(format!("no {role:?} certificate named {name}")))?;
    let transport = ClientTransport::MutualTls {
        pem,
        server_name: Some("localhost".into()),
    };
    let settings = ChannelSettings {
        connect_timeout_ms: ADMIN_CALL_TIMEOUT_MS,
        request_timeout_ms: ADMIN_CALL_TIMEOUT_MS,
        keepalive_interval_ms: 500,
        keepalive_timeout_ms: ADMIN_CALL_TIMEOUT_MS,
        ..ChannelSettings::default()
    };
    ChannelFactory::new(settings, transport).map_err(|e| ChaosError::Pki(e.to_string()))
}

impl ProcCluster {
    /// Writes configs for `spec.nodes` nodes into `dir` (whose `certs/` holds `pki`) and
    /// starts them all.
    pub fn start(
        dir: &Path,
        bins: &Binaries,
        pki: &DevPki,
        spec: &ClusterSpec,
    ) -> Result<ProcCluster, ChaosError> {
        let ports: Vec<(u16, u16)> = (0..spec.nodes)
            .map(|_| Ok((free_port()?, free_port()?)))
            .collect::<Result<_, ChaosError>>()?;
        let mut nodes = Vec::new();
        for id in 1..=spec.nodes {
            let name = spec.node_name(id);
            let config = dir.join(format!("{name}.yaml"));
            std::fs::write(&config, spec.node_yaml(dir, id, &ports))
                .map_err(ChaosError::io(format!("writing {}", config.display())))?;
            let (grpc, http) = ports[id as usize - 1];
            let faketime = match &spec.faketime {
                Some((lib, node)) if *node == id => {
                    let file = dir.join(format!("{name}.faketime"));
                    std::fs::write(&file, "+0s\n").map_err(ChaosError::io("faketime file"))?;
                    Some((lib.clone(), file))
                }
                _ => None,
            };
            nodes.push(Node {
                id,
                grpc_addr: format!("{}:{grpc}", spec.listen_ip),
                http_addr: format!("127.0.0.1:{http}"),
                config,
                log: dir.join(format!("{name}.log")),
                proc: None,
                stopped: false,
                faketime,
                uid: spec
                    .isolatable
                    .filter(|(n, _)| *n == id)
                    .map(|(_, uid)| uid),
            });
        }
        let mut cluster = ProcCluster {
            dir: dir.to_path_buf(),
            nodes,
            name: spec.name.clone(),
            bins: bins.clone(),
            admin: channels(pki, Role::Admin, ADMIN_NAME)?,
        };
        match spec.isolatable {
            Some((first, uid)) => {
                chown_tree(dir, uid)?;
                // It starts first and makes the cluster's signing key, which it could not
                // read if a node running as root had made it.
                cluster.launch(first)?;
                wait_for_file(&spec.signing_key_file(dir), KEY_WAIT_MS)?;
                for id in (1..=spec.nodes).filter(|id| *id != first) {
                    cluster.launch(id)?;
                }
            }
            None => {
                for id in 1..=spec.nodes {
                    cluster.launch(id)?;
                }
            }
        }
        Ok(cluster)
    }

    /// Node `id`'s name, as its certificate and logs name it.
    pub fn node_name(&self, id: u64) -> String {
        format!("{}-{id}", self.name)
    }

    pub fn node(&self, id: u64) -> &Node {
        &self.nodes[id as usize - 1]
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[id as usize - 1]
    }

    /// The gRPC addresses of every node, for agents.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.grpc_addr.clone()).collect()
    }

    /// Starts node `id` (again) from its config and data directory.
    pub fn launch(&mut self, id: u64) -> Result<(), ChaosError> {
        let bin = self.bins.allocator.clone();
        let name = self.node_name(id);
        let node = self.node_mut(id);
        let mut cmd = Command::new(bin);
        cmd.arg("-c").arg(&node.config);
        if let Some(uid) = node.uid {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(uid);
        }
        if let Some((lib, file)) = &node.faketime {
            // Re-read on every call, so a step needs no restart; monotonic clocks are left
            // alone, as a wall-clock step leaves them.
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", file)
                .env("FAKETIME_NO_CACHE", "1")
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        node.proc = Some(Proc::spawn(&name, cmd, &node.log)?);
        node.stopped = false;
        Ok(())
    }

    /// Steps node `id`'s faked wall clock to `offset_s` from the real one; a node whose
    /// clock is not faked is refused by name.
    pub fn set_clock_offset_s(&self, id: u64, offset_s: i64) -> Result<(), ChaosError> {
        let Some((_, file)) = &self.node(id).faketime else {
            return Err(ChaosError::InvalidConfig {
                field: "faketime",
                reason: format!("node {id}'s wall clock is not faked"),
            });
        };
        std::fs::write(file, format!("{offset_s:+}s\n")).map_err(ChaosError::io("faketime file"))
    }

    /// The node whose wall clock is faked, if any.
    pub fn faketime_node(&self) -> Option<u64> {
        self.nodes
            .iter()
            .find(|n| n.faketime.is_some())
            .map(|n| n.id)
    }

    /// SIGKILL: no shutdown, no flush beyond what was acknowledged.
    pub fn kill(&mut self, id: u64) {
        if let Some(p) = self.node_mut(id).proc.take() {
            p.kill();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self, id: u64) -> bool {
        self.node_mut(id)
            .proc
            .take()
            .is_none_or(|p| p.terminate(NODE_STOP_WAIT_MS))
    }

    pub fn pause(&mut self, id: u64) -> Result<(), ChaosError> {
        let node = self.node_mut(id);
        if let Some(p) = &node.proc {
            p.signal(Signal::Stop)?;
            node.stopped = true;
        }
        Ok(())
    }

    pub fn resume(&mut self, id: u64) -> Result<(), ChaosError> {
        let node = self.node_mut(id);
        if let Some(p) = &node.proc {
            p.signal(Signal::Cont)?;
        }
        node.stopped = false;
        Ok(())
    }

    /// Running and not stopped.
    pub fn is_up(&self, id: u64) -> bool {
        let n = self.node(id);
        n.proc.is_some() && !n.stopped
    }

    /// A node that exited on its own, with the tail of its log.
    pub fn crashed(&mut self) -> Option<(u64, String)> {
        for n in &mut self.nodes {
            if let Some(p) = n.proc.as_mut() {
                if let Some(status) = p.exited() {
                    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                    let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                    return Some((n.id, format!("{status}; log (newest first):\n{tail}")));
                }
            }
        }
        None
    }

    pub fn admin(
        &self,
        id: u64,
    ) -> Result<AdminServiceClient<tonic::transport::Channel>, ChaosError> {
        let channel = self
            .admin
            .channel(&self.node(id).grpc_addr)
            .map_err(|e| ChaosError::process(self.node_name(id), e))?;
        Ok(AdminServiceClient::new(channel))
    }

    /// The node that says it leads in the newest term any node names; None during an
    /// election. Followers answer status calls with a pointer to the leader, and a
    /// restarted node names itself from its stored vote until it hears of a newer term, so
    /// the newest term decides.
    pub async fn leader(&self) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for n in self.nodes.iter().filter(|n| self.is_up(n.id)) {
            let Ok(mut admin) = self.admin(n.id) else {
                continue;
            };
            if let Ok(s) = admin.cluster_status(pb::ClusterStatusRequest {}).await {
                let s = s.into_inner();
                if s.leader_id == n.id && best.is_none_or(|(term, _)| s.term > term) {
                    best = Some((s.term, n.id));
                }
            }
        }
        best.map(|(_, id)| id)
    }

    /// Waits until some node leads and every running node reports it caught up (each voter
    /// healthy in the leader's view).
    pub async fn wait_healthy(&self, wait_ms: u64) -> Result<u64, ChaosError> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(wait_ms) {
            if let Some(leader) = self.leader().await {
                if let Ok(mut admin) = self.admin(leader) {
                    if let Ok(s) = admin.cluster_status(pb::ClusterStatusRequest {}).await {
                        let s = s.into_inner();
                        let all = s
                            .members
                            .iter()
                            .filter(|m| self.is_up(m.node_id))
                            .all(|m| m.healthy);
                        if all && s.members.len() as u64 == self.nodes.len() as u64 {
                            return Ok(leader);
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ChaosError::Timeout {
            what: format!(
                "a leader with every running node caught up; the nodes' last log lines:\n{}",
                self.log_tails()
            ),
            waited_ms: wait_ms,
        })
    }

    /// The last few lines of every node's log, for a failure message.
    fn log_tails(&self) -> String {
        const LINES: usize = 5;
        let mut out = String::new();
        for n in &self.nodes {
            let log = std::fs::read_to_string(&n.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            // A crash's cause is above its backtrace, which alone fills the tail.
            let cause = lines
                .iter()
                .find(|l| l.contains("panicked at") || l.starts_with("Error:"))
                .map(|l| format!("{l}\n  ...\n"))
                .unwrap_or_default();
            let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
            out.push_str(&format!("{}:\n{cause}{tail}\n", self.node_name(n.id)));
        }
        out
    }

    /// Applies a policy through whichever node takes it.
    pub async fn apply_policy(&self, yaml: &str, wait_ms: u64) -> Result<(), ChaosError> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < Duration::from_millis(wait_ms) {
            for n in &self.nodes {
                let req = pb::ApplyPolicyRequest {
                    yaml: yaml.to_string(),
                    ..Default::default()
                };
                match self.admin(n.id)?.apply_policy(req).await {
                    Ok(_) => return Ok(()),
                    Err(e) => last = e.message().to_string(),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ChaosError::Timeout {
            what: format!("the cluster to accept the policy (last: {last})"),
            waited_ms: wait_ms,
        })
    }

    /// Each running node's ledger figures for `policy_id`, as its `/metrics` shows them.
    pub async fn figures(&self, policy_id: &str) -> Vec<(u64, Result<ClusterFigures, String>)> {
        let mut out = Vec::new();
        for n in self.nodes.iter().filter(|n| self.is_up(n.id)) {
            let name = self.node_name(n.id);
            let page = fetch_metrics(&name, &n.http_addr).await;
            out.push((
                n.id,
                page.map(|t| parse_figures(&t, policy_id))
                    .map_err(|e| e.to_string()),
            ));
        }
        out
    }
}
