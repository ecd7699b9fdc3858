//! A region's recovery when its root cluster loses its leader, on the real binaries: three
//! root nodes, one region node leasing from them (mutual TLS, as deployed), and a client at
//! the region that asks for one new key after another. The region can grant a new key only
//! with credit the root leased to it for that key, so the first new key granted after a
//! fault shows the region leasing from the root again. Figures: docs/operations.md, "A
//! region's failover, measured".
//!
//! The root's leader is killed (SIGKILL: its sockets are closed and new connections are
//! refused), stopped (SIGSTOP: its connections stay open, the kernel still accepts new ones,
//! and nothing answers on any of them), or killed with its address then dropping connection
//! attempts (as a host gone from the network does). Each time, the test measures from the
//! fault to the root's new leader and to the region's first grant of a key asked for after
//! the fault.

mod process_support;

use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{
    ChannelFactory, ChannelSettings, ClientTransport, DevPki, PkiSpec, Role,
};
use pb::admin_service_client::AdminServiceClient;
use pb::lease_service_client::LeaseServiceClient;
use process_support::{free_port, metrics_page, sample, Proc, ALLOCATOR};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A rate no client here exhausts: a denial can only mean the region has no credit yet.
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1000000, per: 1s}\nburst: 1000000\nscope: global\nlease: {ttl: 5s, refresh_horizon: 1s, reserve_fraction: 0}\n";
/// From the root's new leader to the region's first grant of a new key. The region needs
/// about a second to give up on a leader that stopped answering (its upstream keepalive)
/// and one round trip to the new one, so this leaves a loaded two-core machine a second of
/// slack; the region used to take 2.7 s and more, waiting on the stopped leader.
const REGION_LAG_BOUND_MS: u64 = 2_000;
/// Longest wait for anything to happen before the test gives up, in milliseconds.
const WAIT_MS: u64 = 30_000;
/// The client's pause between two asks for the same key, in milliseconds.
const ASK_EVERY_MS: u64 = 10;
/// The client's pause after a grant before it asks for the next key, in milliseconds. The
/// region reports on every key it holds twice a second, one call after another, so fewer
/// keys keep its rounds short on a debug build; it also bounds how late after a fault the
/// first new key is asked for.
const NEXT_KEY_AFTER_MS: u64 = 100;

/// The certificates of every party, written to `dir/certs`.
fn make_pki(dir: &Path) -> DevPki {
    let nodes = ["global-1", "global-2", "global-3", "region-eu-1"];
    let spec = PkiSpec::local(&nodes, &["client"], &["ops"]);
    let pki = DevPki::generate(&spec, std::time::SystemTime::now()).unwrap();
    pki.write_to(&dir.join("certs"), true).unwrap();
    pki
}

/// A node's `tls:` mapping.
fn tls_yaml(dir: &Path, node: &str) -> String {
    let c = dir.join("certs");
    format!(
        "tls: {{ca: {c}/ca.pem, cert: {c}/allocator-{node}.pem, key: {c}/allocator-{node}-key.pem}}\n",
        c = c.display()
    )
}

/// Channels as `name`, whose calls give up quickly, so a stopped node costs the test little.
fn channels(pki: &DevPki, role: Role, name: &str) -> ChannelFactory {
    let settings = ChannelSettings {
        connect_timeout_ms: 500,
        request_timeout_ms: 500,
        keepalive_interval_ms: 250,
        keepalive_timeout_ms: 500,
        ..ChannelSettings::default()
    };
    let transport = ClientTransport::MutualTls {
        pem: pki.tls_pem(role, name).unwrap(),
        server_name: Some("localhost".into()),
    };
    ChannelFactory::new(settings, transport).unwrap()
}

/// Starts `cmd` with both its outputs (the binary logs to standard output) in `log`.
fn spawn_logged(mut cmd: Command, log: &Path) -> Proc {
    let out = std::fs::File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    Proc(cmd.stdout(out).stderr(err).spawn().unwrap())
}

struct RootNode {
    addr: String,
    http: String,
    config: PathBuf,
    log: PathBuf,
    proc: Option<Proc>,
}

/// The root cluster, with the product's Raft timing.
struct Root {
    nodes: Vec<RootNode>,
    admin: ChannelFactory,
}

impl Root {
    fn start(dir: &Path, pki: &DevPki) -> Root {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let bootstrap: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (grpc, _))| format!("{{id: {}, addr: \"127.0.0.1:{grpc}\"}}", i + 1))
            .collect();
        let mut nodes = Vec::new();
        for (i, (grpc, http)) in ports.iter().enumerate() {
            let id = i as u64 + 1;
            let config = dir.join(format!("global-{id}.yaml"));
            std::fs::write(
                &config,
                format!(
                    "node_id: {id}\ncluster: global\ngrpc_addr: 127.0.0.1:{grpc}\n\
                     http_addr: 127.0.0.1:{http}\nadvertise_addr: 127.0.0.1:{grpc}\n\
                     data_dir: {d}\nsigning_key: {key}\nbootstrap: [{b}]\n{tls}",
                    d = dir.join(format!("global-{id}")).display(),
                    tls = tls_yaml(dir, &format!("global-{id}")),
                    key = dir.join("global-lease-key.p8").display(),
                    b = bootstrap.join(", "),
                ),
            )
            .unwrap();
            nodes.push(RootNode {
                addr: format!("127.0.0.1:{grpc}"),
                http: format!("127.0.0.1:{http}"),
                config,
                log: dir.join(format!("global-{id}.log")),
                proc: None,
            });
        }
        let mut root = Root {
            nodes,
            admin: channels(pki, Role::Admin, "ops"),
        };
        for id in 1..=3 {
            root.launch(id);
        }
        root
    }

    fn node(&mut self, id: u64) -> &mut RootNode {
        &mut self.nodes[id as usize - 1]
    }

    fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    fn launch(&mut self, id: u64) {
        let node = self.node(id);
        let mut cmd = Command::new(ALLOCATOR);
        cmd.arg("-c").arg(&node.config);
        node.proc = Some(spawn_logged(cmd, &node.log));
    }

    /// Sends `signal` (a `kill` name: `KILL`, `STOP`, `CONT`) to node `id`.
    fn signal(&mut self, id: u64, signal: &str) {
        let pid = self.node(id).proc.as_ref().expect("node runs").0.id();
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }

    async fn status(&self, id: u64) -> Option<pb::ClusterStatusResponse> {
        let channel = self.admin.channel(&self.nodes[id as usize - 1].addr).ok()?;
        let mut admin = AdminServiceClient::new(channel);
        let status = admin.cluster_status(pb::ClusterStatusRequest {}).await;
        Some(status.ok()?.into_inner())
    }

    /// The node that says it leads in the newest term any of `ids` names, and that term.
    async fn leader_among(&self, ids: &[u64]) -> Option<(u64, u64)> {
        let mut best: Option<(u64, u64)> = None;
        for &id in ids {
            if let Some(s) = self.status(id).await {
                if s.leader_id == id && best.is_none_or(|(_, term)| s.term > term) {
                    best = Some((id, s.term));
                }
            }
        }
        best
    }

    /// The leader and its term once every node is caught up in its view.
    async fn wait_healthy(&self) -> (u64, u64) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(WAIT_MS) {
            if let Some((leader, term)) = self.leader_among(&[1, 2, 3]).await {
                if let Some(s) = self.status(leader).await {
                    if s.members.len() == 3 && s.members.iter().all(|m| m.healthy) {
                        return (leader, term);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let logs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| std::fs::read_to_string(&n.log).unwrap_or_default())
            .collect();
        panic!(
            "the root never became healthy; its logs:\n{}",
            logs.join("\n")
        );
    }

    async fn apply_policy(&self, yaml: &str) {
        let (leader, _) = self.wait_healthy().await;
        let channel = self.admin.channel(&self.nodes[leader as usize - 1].addr);
        let req = pb::ApplyPolicyRequest {
            yaml: yaml.into(),
            ..Default::default()
        };
        AdminServiceClient::new(channel.unwrap())
            .apply_policy(req)
            .await
            .expect("the root's leader takes the policy");
    }
}

/// A one-node region cluster leasing from `upstream`, with the upstream driver's decisions
/// in its log: the process, its gRPC address and its HTTP address.
fn start_region(dir: &Path, upstream: &[String]) -> (Proc, String, String) {
    let (grpc, http) = (free_port(), free_port());
    let config = dir.join("region.yaml");
    let upstream: Vec<String> = upstream.iter().map(|a| format!("\"{a}\"")).collect();
    std::fs::write(
        &config,
        format!(
            "node_id: 1\ncluster: region-eu\nlevel: region\ngrpc_addr: 127.0.0.1:{grpc}\n\
             http_addr: 127.0.0.1:{http}\nadvertise_addr: 127.0.0.1:{grpc}\ndata_dir: {d}\n\
             signing_key: {d}/lease-key.p8\nupstream: [{u}]\n\
             bootstrap: [{{id: 1, addr: \"127.0.0.1:{grpc}\"}}]\n{tls}",
            d = dir.join("region").display(),
            tls = tls_yaml(dir, "region-eu-1"),
            u = upstream.join(", "),
        ),
    )
    .unwrap();
    let mut cmd = Command::new(ALLOCATOR);
    cmd.arg("-c").arg(&config).env(
        "RUST_LOG",
        "info,openraft=warn,leasehold_allocator::upstream=debug",
    );
    (
        spawn_logged(cmd, &dir.join("region.log")),
        format!("127.0.0.1:{grpc}"),
        format!("127.0.0.1:{http}"),
    )
}

/// Grants of new keys at the region: when each key was first asked for, when granted.
#[derive(Default)]
struct Grants {
    granted: Mutex<Vec<(Instant, Instant)>>,
    stop: AtomicBool,
}

impl Grants {
    /// When the first key asked for at or after `t` was granted.
    fn first_asked_after(&self, t: Instant) -> Option<Instant> {
        let g = self.granted.lock().unwrap();
        g.iter().find(|(asked, _)| *asked >= t).map(|(_, at)| *at)
    }
}

/// Asks the region for one new key after another, each until it is granted.
async fn ask_new_keys(channels: ChannelFactory, region: String, grants: Arc<Grants>) {
    let mut request_id = 0;
    for n in 0.. {
        let asked = Instant::now();
        loop {
            if grants.stop.load(Ordering::Relaxed) {
                return;
            }
            request_id += 1;
            let req = pb::AcquireRequest {
                holder_id: "client".into(),
                policy_id: "api".into(),
                key: format!("k{n}"),
                want_credit: 1,
                request_id,
                ..Default::default()
            };
            let mut client = LeaseServiceClient::new(channels.channel(&region).unwrap());
            if let Ok(r) = client.acquire(req).await {
                if r.into_inner().lease.is_some() {
                    grants.granted.lock().unwrap().push((asked, Instant::now()));
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(ASK_EVERY_MS)).await;
        }
        tokio::time::sleep(Duration::from_millis(NEXT_KEY_AFTER_MS)).await;
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Stop,
    /// Killed, and its address then drops connection attempts (a host gone: nothing
    /// answers its address's ARP, or a firewall drops the packets).
    KillSilent,
}

/// A listener on an address whose accept queue is full, so the kernel drops every further
/// connection attempt (SYN) to it and the connecting side waits out its own timeout.
struct BlackHole {
    _listener: tokio::net::TcpListener,
    _queued: Vec<tokio::net::TcpStream>,
}

impl BlackHole {
    async fn at(addr: &str) -> BlackHole {
        let addr: std::net::SocketAddr = addr.parse().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(addr).unwrap();
        let listener = socket.listen(0).unwrap();
        let mut queued = Vec::new();
        // Connect until one attempt is no longer answered: the queue is full from then on.
        while queued.len() < 8 {
            let attempt = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_millis(200), attempt).await {
                Ok(Ok(stream)) => queued.push(stream),
                _ => break,
            }
        }
        BlackHole {
            _listener: listener,
            _queued: queued,
        }
    }
}

/// One fault on the root's leader, in milliseconds from the fault.
#[derive(Debug)]
struct Sample {
    fault: Fault,
    elected_ms: u64,
    region_ms: u64,
}

/// Polls `probe` until it finds something, for at most [`WAIT_MS`].
async fn poll<T>(mut probe: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(WAIT_MS) {
        if let Some(found) = probe().await {
            return Some(found);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

async fn wait_for<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    let found = poll(probe).await;
    found.unwrap_or_else(|| panic!("{what} did not happen within {WAIT_MS} ms"))
}

/// Faults the root's leader while the region is leasing, measures, and undoes the fault.
async fn trial(root: &mut Root, grants: &Grants, fault: Fault) -> Sample {
    let (leader, term) = root.wait_healthy().await;
    // Let the region settle on the healed root, and see it grant a new key, first.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let settled = Instant::now();
    wait_for("a grant while the root is healthy", async || {
        grants.first_asked_after(settled)
    })
    .await;
    let at = Instant::now();
    let mut hole = None;
    match fault {
        Fault::Kill | Fault::KillSilent => {
            let proc = root.node(leader).proc.take().expect("leader runs");
            drop(proc);
            if let Fault::KillSilent = fault {
                hole = Some(BlackHole::at(&root.node(leader).addr).await);
            }
        }
        Fault::Stop => root.signal(leader, "STOP"),
    }
    let others: Vec<u64> = (1..=3).filter(|&id| id != leader).collect();
    let elected = wait_for("an election", async || {
        let (_, t) = root.leader_among(&others).await?;
        (t > term).then(Instant::now)
    })
    .await;
    // A region that never leases again counts as having taken the whole wait.
    let granted = poll(async || grants.first_asked_after(at))
        .await
        .unwrap_or_else(|| at + Duration::from_millis(WAIT_MS));
    drop(hole);
    match fault {
        Fault::Kill | Fault::KillSilent => root.launch(leader),
        Fault::Stop => root.signal(leader, "CONT"),
    }
    Sample {
        fault,
        elected_ms: (elected - at).as_millis() as u64,
        region_ms: (granted - at).as_millis() as u64,
    }
}

/// The region reached the root only through `LeaseBatch`: its driver counts batches, and no
/// root node served a lease call of its own (nobody else calls the root here).
async fn every_call_upstream_was_batched(root: &Root, region_http: &str) {
    // The last trial's node was just started again; let every node serve first.
    root.wait_healthy().await;
    let page = metrics_page(region_http);
    assert!(
        sample(&page, "leasehold_upstream_batch_calls_total") > 0,
        "{page}"
    );
    assert!(sample(&page, "leasehold_upstream_acquired_total") > 0);
    let count = |page: &str, m: &str| {
        sample(
            page,
            &format!("leasehold_rpc_duration_seconds_count{{method=\"{m}\"}}"),
        )
    };
    let mut batches = 0;
    for n in &root.nodes {
        let page = metrics_page(&n.http);
        for single in ["Acquire", "Report", "Release"] {
            assert_eq!(count(&page, single), 0, "{single} at {}", n.addr);
        }
        batches += count(&page, "LeaseBatch");
        let applied: u64 = ["acquire", "report", "release"]
            .iter()
            .map(|c| {
                sample(
                    &page,
                    &format!("leasehold_lease_calls_total{{call=\"{c}\"}}"),
                )
            })
            .sum();
        let batched = sample(&page, "leasehold_lease_calls_batched_total");
        assert_eq!(applied, batched, "every call at {} came in a batch", n.addr);
    }
    assert!(batches > 0, "the root's nodes served no LeaseBatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_leases_again_soon_after_its_roots_leader_is_killed_or_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let mut root = Root::start(dir.path(), &pki);
    root.apply_policy(POLICY).await;
    let (_region, region_addr, region_http) = start_region(dir.path(), &root.addrs());
    let grants = Arc::new(Grants::default());
    let client = channels(&pki, Role::Agent, "client");
    let client = tokio::spawn(ask_new_keys(client, region_addr, Arc::clone(&grants)));
    let origin = Instant::now();
    wait_for("the region's first grant", async || {
        grants.first_asked_after(origin)
    })
    .await;

    let mut samples = Vec::new();
    let faults = [Fault::Kill, Fault::Stop, Fault::KillSilent];
    for fault in [faults, faults].concat() {
        let sample = trial(&mut root, &grants, fault).await;
        eprintln!(
            "{:?}: the root's new leader after {} ms, the region granting after {} ms",
            sample.fault, sample.elected_ms, sample.region_ms
        );
        samples.push(sample);
    }
    grants.stop.store(true, Ordering::Relaxed);
    client.await.unwrap();
    every_call_upstream_was_batched(&root, &region_http).await;
    let slow: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.region_ms > s.elected_ms + REGION_LAG_BOUND_MS)
        .collect();
    let log = std::fs::read_to_string(dir.path().join("region.log")).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    assert!(
        slow.is_empty(),
        "the region leased again more than {REGION_LAG_BOUND_MS} ms after the root's new \
         leader: {slow:?}; its log (newest first):\n{}",
        tail.join("\n")
    );
}
