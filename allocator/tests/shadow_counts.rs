//! Shadow mode end to end: an agent enforcing a shadow-mode policy with leased credit
//! admits everything, counts per lease what the policy would have denied, and reports it on
//! its renewals; the allocator sums the reports per policy version and `leasectl policy get`
//! shows the sum, which never exceeds what the agent counted.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig, RemoteGrantor};
use leasehold_allocator::config::AllocatorConfig;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::transport::{
    ChannelFactory, ChannelSettings, ClientTransport, DevPki, PkiSpec, Role,
};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

const LEASECTL: &str = env!("CARGO_BIN_EXE_leasectl");
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 200, per: 1s}\nburst: 100\nscope: global\nmode: shadow\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";

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

fn node_config(dir: &Path) -> (AllocatorConfig, String) {
    let (grpc, http) = (free_port(), free_port());
    let (c, d) = (dir.join("certs"), dir.join("global"));
    let yaml = format!(
        "node_id: 1\ncluster: global\ngrpc_addr: 127.0.0.1:{grpc}\nhttp_addr: 127.0.0.1:{http}\n\
         advertise_addr: 127.0.0.1:{grpc}\ndata_dir: {d}\nsigning_key: {d}/lease-key.p8\n\
         bootstrap: [{{id: 1, addr: \"127.0.0.1:{grpc}\"}}]\n\
         tls: {{ca: {c}/ca.pem, cert: {c}/allocator-global-1.pem, key: {c}/allocator-global-1-key.pem}}\n\
         raft: {{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}}\ntick_ms: 20\n",
        d = d.display(),
        c = c.display(),
    );
    let cfg = AllocatorConfig::from_yaml(&yaml).expect("valid config");
    (cfg, format!("127.0.0.1:{grpc}"))
}

async fn leasectl_policy_get(dir: &Path, server: &str) -> serde_json::Value {
    let certs = dir.join("certs");
    let mut cmd = std::process::Command::new(LEASECTL);
    cmd.env("HOME", dir)
        .args(["--server", server, "--server-name", "localhost"])
        .arg("--ca")
        .arg(certs.join("ca.pem"))
        .arg("--cert")
        .arg(certs.join("admin-ops.pem"))
        .arg("--key")
        .arg(certs.join("admin-ops-key.pem"))
        .args(["policy", "get", "api", "-o", "json"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_would_deny_counts_reach_policy_get() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1"], &["gw-1"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let (cfg, addr) = node_config(dir.path());
    let (stop_node, rx) = watch::channel(false);
    let node = tokio::spawn(async move {
        leasehold_allocator::server::run(cfg, rx)
            .await
            .expect("node runs")
    });
    let admin_channel = channels(&pki, Role::Admin, "ops").channel(&addr).unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let req = pb::ApplyPolicyRequest {
            yaml: POLICY.into(),
            ..Default::default()
        };
        let mut admin = AdminServiceClient::new(admin_channel.clone());
        if admin.apply_policy(req).await.is_ok() {
            break;
        }
        assert!(Instant::now() < until, "the allocator accepted the policy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let clock = SystemClock::new();
    let policy = Policy::from_yaml(POLICY).unwrap();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(RuleSource::from_policies(vec![policy]))
            .unwrap(),
    );
    let grantor = Arc::new(RemoteGrantor::new(
        channels(&pki, Role::Agent, "gw-1"),
        vec![addr.clone()],
        3,
    ));
    let mut mcfg = ManagerConfig::new("gw-1");
    mcfg.tick_ms = 5;
    mcfg.report_every_ms = 100;
    mcfg.retry_ms = 50;
    let (stop_agent, arx) = watch::channel(false);
    let queue = engine.take_acquire_queue().unwrap();
    let manager = tokio::spawn(LeaseManager::new(mcfg, grantor, clock.clone(), queue).run(arx));

    // Far more than the policy allows: in shadow mode every request is admitted anyway.
    let started = Instant::now();
    let (mut offered, mut admitted) = (0u64, 0u64);
    while started.elapsed() < Duration::from_millis(2_000) {
        for _ in 0..20 {
            let entries = [("tenant", "acme")];
            let dims = [Dimension::policy("api", &entries)];
            offered += 1;
            admitted += u64::from(engine.admit(&AdmitRequest::new(&dims), clock.now()).allowed);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(admitted, offered, "shadow mode admits everything");
    let counted: u64 = engine
        .stats()
        .policies
        .iter()
        .map(|p| p.counters.shadow_denied)
        .sum();
    assert!(
        counted > offered / 2,
        "the agent counted would-denies: {counted} of {offered}"
    );

    // Renewals carry the per-lease counts; wait until a good part has arrived.
    let until = Instant::now() + Duration::from_secs(10);
    let reported = loop {
        let got = leasectl_policy_get(dir.path(), &addr).await;
        let n = got["shadow_would_deny_requests"].as_u64().unwrap();
        if n * 2 > counted || Instant::now() > until {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("agent counted {counted} would-denies, allocator has {reported}");
    assert!(
        reported * 2 > counted,
        "reports reached the allocator: {reported} of {counted}"
    );
    assert!(
        reported <= counted,
        "never more than counted: {reported} > {counted}"
    );

    stop_agent.send(true).unwrap();
    manager.await.unwrap();
    stop_node.send(true).unwrap();
    node.await.unwrap();
}
