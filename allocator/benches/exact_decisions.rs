//! Load generator: exact decisions per second through a 3-node allocator cluster over
//! mutual TLS, as agents make them (the Decide call of the lease service).
//!
//! `cargo bench -p leasehold-allocator --bench exact_decisions -- [--seconds S] [--clients N]
//! [--keys K] [--agents A] [--agent-calls C]`
//!
//! Three nodes of the allocator server run in this process on loopback, each with its own
//! sled directory (every log append fsynced), with certificates from a fresh development
//! PKI. `--clients` concurrent callers decide one unit each on one of `--keys` keys of an
//! exact policy large enough never to refuse, one decision after another. The callers are
//! shared out over `--agents` agents, each with its own connection following the leader and
//! sending the decisions that wait together in one call, at most `--agent-calls` (default 4,
//! the agent's) calls at once, as the agent does (`CoalescingGrantor`); with `--agents 0` every decision is its own Decide call on one
//! shared connection. Reports decisions/s and the latency of each decision (p50, p99, max).

mod load;

use leasehold_allocator::config::AllocatorConfig;
use leasehold_client::{CoalesceLimits, CoalescingGrantor, Grantor, RemoteGrantor};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::transport::{
    ChannelFactory, ChannelSettings, ClientTransport, DevPki, PkiSpec, Role,
};
use load::{arg, Latencies};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

const POLICY: &str = "id: exact\ndimensions: [{name: tenant}]\nscope: global\n\
    enforcement: exact\nrate: {units: 1000000000, per: 1s}\nburst: 1000000000\n";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn channels(pki: &DevPki, role: Role, name: &str) -> ChannelFactory {
    let transport = ClientTransport::MutualTls {
        pem: pki.tls_pem(role, name).unwrap(),
        server_name: Some("localhost".into()),
    };
    ChannelFactory::new(ChannelSettings::default(), transport).unwrap()
}

/// Starts the three nodes; returns their gRPC addresses and stop switches.
fn start_cluster(dir: &Path) -> (Vec<String>, Vec<watch::Sender<bool>>) {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let members: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (g, _))| format!("{{id: {}, addr: \"127.0.0.1:{g}\"}}", i + 1))
        .collect();
    let certs = dir.join("certs");
    let mut stops = Vec::new();
    for (i, (grpc, http)) in ports.iter().enumerate() {
        let id = i + 1;
        let data = dir.join(format!("node-{id}"));
        let yaml = format!(
            "node_id: {id}\ncluster: global\ngrpc_addr: 127.0.0.1:{grpc}\nhttp_addr: 127.0.0.1:{http}\n\
             advertise_addr: 127.0.0.1:{grpc}\ndata_dir: {d}\nsigning_key: {d}/lease-key.p8\n\
             bootstrap: [{m}]\n\
             tls: {{ca: {c}/ca.pem, cert: {c}/allocator-global-{id}.pem, key: {c}/allocator-global-{id}-key.pem}}\n",
            d = data.display(),
            c = certs.display(),
            m = members.join(", "),
        );
        let cfg = AllocatorConfig::from_yaml(&yaml).expect("valid config");
        let (stop, rx) = watch::channel(false);
        tokio::spawn(async move {
            leasehold_allocator::server::run(cfg, rx)
                .await
                .expect("node runs")
        });
        stops.push(stop);
    }
    let addrs = ports
        .iter()
        .map(|(g, _)| format!("127.0.0.1:{g}"))
        .collect();
    (addrs, stops)
}

/// Applies the policy through whichever node leads, once there is a leader.
async fn apply_policy(pki: &DevPki, addrs: &[String]) {
    let admin = channels(pki, Role::Admin, "ops");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for addr in addrs {
            let mut client = AdminServiceClient::new(admin.channel(addr).unwrap());
            let req = pb::ApplyPolicyRequest {
                yaml: POLICY.into(),
                ..Default::default()
            };
            if client.apply_policy(req).await.is_ok() {
                return;
            }
        }
        assert!(Instant::now() < deadline, "no node accepted the policy");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Decides one unit on key `c % keys` until stopped; the latency of each admitted one.
async fn caller(
    grantor: Arc<dyn Grantor>,
    c: u64,
    keys: u64,
    stop: Arc<AtomicBool>,
) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let req = pb::DecideRequest {
        holder_id: "bench".into(),
        items: vec![pb::DecideItem {
            policy_id: "exact".into(),
            key: format!("exact:tenant=t{}", c % keys),
            units: 1,
        }],
        decision_id: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        if let Ok(resp) = grantor.decide(req.clone()).await {
            if resp.admitted {
                latencies.push(t.elapsed());
            }
        }
    }
    latencies
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let seconds = arg("--seconds", 10);
    let clients = arg("--clients", 256);
    let keys = arg("--keys", 1_000).max(1);
    let agents = arg("--agents", 4);
    let limits = CoalesceLimits {
        batches_in_flight_max: arg("--agent-calls", 4) as usize,
        ..CoalesceLimits::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1", "global-2", "global-3"], &["bench"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let (addrs, stops) = start_cluster(dir.path());
    apply_policy(&pki, &addrs).await;

    let remote = || -> Arc<dyn Grantor> {
        Arc::new(RemoteGrantor::new(
            channels(&pki, Role::Agent, "bench"),
            addrs.clone(),
            3,
        ))
    };
    let grantors: Vec<Arc<dyn Grantor>> = match agents {
        0 => vec![remote()],
        n => (0..n)
            .map(|_| {
                let agent = CoalescingGrantor::new(remote(), "bench".into(), limits.clone());
                Arc::new(agent) as Arc<dyn Grantor>
            })
            .collect(),
    };
    // Warm up: find the leader and open each connection.
    for g in &grantors {
        let warm = caller(Arc::clone(g), 0, keys, Arc::new(AtomicBool::new(false)));
        let _ = tokio::time::timeout(Duration::from_millis(300), warm).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Latencies::run(seconds, Arc::clone(&stop), || {
        (0..clients)
            .map(|c| {
                let g = Arc::clone(&grantors[c as usize % grantors.len()]);
                tokio::spawn(caller(g, c, keys, Arc::clone(&stop)))
            })
            .collect()
    })
    .await;
    println!(
        "3-node cluster over mutual TLS, fsync on append, {clients} callers over {agents} \
         agents, {keys} keys, {seconds} s"
    );
    latencies.print("decision");
    for s in stops {
        let _ = s.send(true);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
}
