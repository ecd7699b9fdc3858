//! A cluster of `leasehold-allocator` processes for a load generator: configs written,
//! nodes started (and killed when dropped), the leader waited for, and each node's
//! `/metrics` read for the figures the capacity model needs.

use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, DevPki, Role};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One policy whose budget no load reaches: every grant is the cluster's work alone.
pub const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nscope: global\n\
    rate: {units: 1000000000, per: 1s}\nburst: 1000000000\n\
    lease: {ttl: 30s, refresh_horizon: 1s, reserve_fraction: 0}\n";

/// Connections as `name` of `role`, with its certificate from `pki`.
pub fn channels(pki: &DevPki, role: Role, name: &str) -> ChannelFactory {
    let transport = ClientTransport::MutualTls {
        pem: pki.tls_pem(role, name).unwrap(),
        server_name: Some("localhost".into()),
    };
    ChannelFactory::new(ChannelSettings::default(), transport).unwrap()
}

/// Longest wait for a leader, a policy or a scrape, in milliseconds.
const WAIT_MS: u64 = 30_000;

pub struct ProcessCluster {
    grpc: Vec<String>,
    http: Vec<String>,
    children: Vec<Child>,
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl ProcessCluster {
    /// Starts `nodes` nodes of cluster `name` from `bin`, with the certificates in
    /// `dir/certs`; a region of `upstream` when that is not empty.
    pub fn start(bin: &str, dir: &Path, name: &str, nodes: u64, upstream: &[String]) -> Self {
        let ports: Vec<(u16, u16)> = (0..nodes).map(|_| (free_port(), free_port())).collect();
        let members: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (g, _))| format!("{{id: {}, addr: \"127.0.0.1:{g}\"}}", i + 1))
            .collect();
        let level = if upstream.is_empty() {
            String::new()
        } else {
            let u: Vec<String> = upstream.iter().map(|a| format!("\"{a}\"")).collect();
            format!("level: region\nupstream: [{}]\n", u.join(", "))
        };
        let certs = dir.join("certs");
        let mut children = Vec::new();
        for (i, (grpc, http)) in ports.iter().enumerate() {
            let node = format!("{name}-{}", i + 1);
            let yaml = format!(
                "node_id: {id}\ncluster: {name}\n{level}grpc_addr: 127.0.0.1:{grpc}\n\
                 http_addr: 127.0.0.1:{http}\nadvertise_addr: 127.0.0.1:{grpc}\n\
                 data_dir: {d}\nsigning_key: {k}\nbootstrap: [{m}]\n\
                 tls: {{ca: {c}/ca.pem, cert: {c}/allocator-{node}.pem, key: {c}/allocator-{node}-key.pem}}\n",
                id = i + 1,
                d = dir.join(&node).display(),
                k = dir.join(format!("{name}-lease-key.p8")).display(),
                c = certs.display(),
                m = members.join(", "),
            );
            let config = dir.join(format!("{node}.yaml"));
            std::fs::write(&config, yaml).unwrap();
            let log = std::fs::File::create(dir.join(format!("{node}.log"))).unwrap();
            let child = Command::new(bin)
                .arg("-c")
                .arg(&config)
                .env("RUST_LOG", "warn")
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            children.push(child);
            if i == 0 {
                // The first node makes the cluster's signing key, which the others read.
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        ProcessCluster {
            grpc: ports
                .iter()
                .map(|(g, _)| format!("127.0.0.1:{g}"))
                .collect(),
            http: ports
                .iter()
                .map(|(_, h)| format!("127.0.0.1:{h}"))
                .collect(),
            children,
        }
    }

    pub fn addrs(&self) -> Vec<String> {
        self.grpc.clone()
    }

    /// Calls `f` on every node's admin service until it answers Some, for up to WAIT_MS.
    async fn until<T>(
        &self,
        admin: &ChannelFactory,
        what: &str,
        mut f: impl AsyncFnMut(AdminServiceClient<tonic::transport::Channel>) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
        loop {
            for addr in &self.grpc {
                if let Ok(channel) = admin.channel(addr) {
                    if let Some(out) = f(AdminServiceClient::new(channel)).await {
                        return out;
                    }
                }
            }
            assert!(Instant::now() < deadline, "waited {WAIT_MS} ms for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_leader(&self, admin: &ChannelFactory) {
        self.until(admin, "a leader", async |mut c| {
            let s = c.cluster_status(pb::ClusterStatusRequest {}).await.ok()?;
            (s.into_inner().leader_id != 0).then_some(())
        })
        .await
    }

    pub async fn apply_policy(&self, admin: &ChannelFactory, yaml: &str) {
        self.until(admin, "the policy to be applied", async |mut c| {
            let req = pb::ApplyPolicyRequest {
                yaml: yaml.to_string(),
                ..Default::default()
            };
            c.apply_policy(req).await.ok().map(|_| ())
        })
        .await
    }

    /// Waits until the cluster serves policy `id` (a region mirrors it from its upstream).
    pub async fn wait_policy(&self, admin: &ChannelFactory, id: &str) {
        self.until(admin, "the policy to arrive", async |mut c| {
            let req = pb::GetPolicyRequest {
                policy_id: id.to_string(),
                ..Default::default()
            };
            c.get_policy(req).await.ok().map(|_| ())
        })
        .await
    }
}

/// One cluster's figures at one moment: lease calls applied (summed over the nodes, alone
/// or in batches), of them the acquires and reports (the calls that can grant), and the policy's credit
/// granted and reported used (the most any replica has applied).
#[derive(Clone, Copy, Debug, Default)]
pub struct Scrape {
    pub lease_calls: u64,
    pub granting_calls: u64,
    pub granted: u64,
    pub used: u64,
}

fn metrics(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(WAIT_MS)))
        .unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

fn value(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

pub fn scrape(cluster: &ProcessCluster) -> Scrape {
    let mut out = Scrape::default();
    for addr in &cluster.http {
        let text = metrics(addr);
        // Calls the ledger applied, alone or inside LeaseBatch calls.
        let calls = |c: &str| {
            value(
                &text,
                &format!("leasehold_lease_calls_total{{call=\"{c}\"}} "),
            )
        };
        let granting = calls("acquire") + calls("report");
        out.granting_calls += granting;
        out.lease_calls += granting + calls("release");
        let policy = "{policy=\"api\"} ";
        out.granted = out.granted.max(value(
            &text,
            &format!("leasehold_credit_granted_total{policy}"),
        ));
        out.used = out.used.max(value(
            &text,
            &format!("leasehold_credit_used_total{policy}"),
        ));
    }
    out
}
