//! A key spray against the release binaries as a hostile caller would send it: an allocator
//! and an agent leasing from it, one client sending Admit calls for a new tenant each time
//! as fast as the agent answers, while an existing tenant keeps using its key and honest new
//! tenants arrive. The existing tenant keeps its service, new tenants get leases, no answer
//! says the allocator is unreachable while it is up, and the agent's memory levels off once
//! its key table is full, a bound the operator sets with `--keys-max`.

mod process_support;

use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admit_service_client::AdmitServiceClient;
use leasehold_proto::transport::{
    ChannelFactory, ChannelSettings, ClientTransport, DevPki, PkiSpec, Role,
};
use process_support::{
    ctl_insecure, free_port, spawn_logged, start_insecure_allocator, wait_agent_ready, Proc,
};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\n\
    rate: {units: 1000, per: 1s}\nburst: 1000\nscope: global\n\
    lease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";
const KEYS_MAX: usize = 4_096;
const SPRAY_S: u64 = 25;
/// Concurrent callers of the sprayer.
const SPRAYERS: usize = 8;
/// The existing tenant asks every this many milliseconds.
const STEADY_EVERY_MS: u64 = 100;
/// Least share of the existing tenant's requests admitted during the spray, in percent.
const STEADY_ADMITTED_MIN_PCT: u64 = 99;
/// Honest new tenants, arriving one a second from the spray's fifth second.
const NEWCOMERS: usize = 5;
/// Most time a newcomer asking every 200 ms may wait for its first admission.
const NEWCOMER_WAIT_MAX: Duration = Duration::from_secs(5);

fn request(tenant: &str) -> pb::AdmitRequest {
    pb::AdmitRequest {
        dimensions: vec![pb::Dimension {
            policy_id: "api".into(),
            entries: vec![pb::dimension::Entry {
                key: "tenant".into(),
                value: tenant.into(),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether the answer is an admission; panics on an unreachable allocator, which is up.
fn admitted(answer: &pb::AdmitResponse, who: &str) -> bool {
    let unavailable = pb::Reason::UpstreamUnavailable as i32;
    assert!(
        answer.results.iter().all(|r| r.reason != unavailable),
        "{who} was told the allocator is unreachable while it is up: {answer:?}"
    );
    answer.allowed
}

/// The sprays of this file's tests run one at a time: each needs the machine to itself to
/// outrun what the agent can lease.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Agent {
    proc: Proc,
    grpc: String,
}

fn start_agent(dir: &std::path::Path, server: &str) -> Agent {
    let (grpc, http) = (free_port(), free_port());
    let mut cmd = Command::new(process_support::agent_binary());
    cmd.args(["--allocator", server, "--insecure", "--holder-id", "gw-1"])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--keys-max", &KEYS_MAX.to_string()]);
    let proc = spawn_logged(cmd, &dir.join("agent.log"));
    wait_agent_ready(http);
    Agent {
        proc,
        grpc: format!("http://127.0.0.1:{grpc}"),
    }
}

async fn spray(channel: Channel, offset: usize, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let mut client = AdmitServiceClient::new(channel);
    let mut n = offset;
    while !stop.load(Ordering::Relaxed) {
        let answer = client.admit(request(&format!("spray-{n}"))).await.unwrap();
        admitted(&answer.into_inner(), "a sprayed key");
        sent.fetch_add(1, Ordering::Relaxed);
        n += SPRAYERS;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_tenants_keep_their_service_and_memory_levels_off_under_a_key_spray() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (node, server) = start_insecure_allocator(dir.path());
    let file = dir.path().join("api.yaml");
    std::fs::write(&file, POLICY).unwrap();
    let out = ctl_insecure(&server, &["policy", "apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let agent = start_agent(dir.path(), &server);
    let pid = agent.proc.0.id();
    let channel = Channel::from_shared(agent.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut steady = AdmitServiceClient::new(channel.clone());
    // The existing tenant holds a lease before the spray starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !admitted(
        &steady.admit(request("acme")).await.unwrap().into_inner(),
        "acme",
    ) {
        assert!(Instant::now() < deadline, "acme never admitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss_before = rss_kib(pid);
    let node_rss_before = rss_kib(node.0.id());

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sprayers: Vec<_> = (0..SPRAYERS)
        .map(|i| {
            let ch = Channel::from_shared(agent.grpc.clone())
                .unwrap()
                .connect_lazy();
            tokio::spawn(spray(ch, i, Arc::clone(&stop), Arc::clone(&sent)))
        })
        .collect();
    let started = Instant::now();
    let (mut asked, mut served) = (0u64, 0u64);
    let mut newcomers: Vec<(String, Instant, Option<Duration>)> = Vec::new();
    let mut rss = Vec::new();
    let mut last_sample = Instant::now();
    while started.elapsed() < Duration::from_secs(SPRAY_S) {
        asked += 1;
        served += u64::from(admitted(
            &steady.admit(request("acme")).await.unwrap().into_inner(),
            "acme",
        ));
        let second = started.elapsed().as_secs() as usize;
        if (5..5 + NEWCOMERS).contains(&second) && newcomers.len() < second - 4 {
            newcomers.push((format!("new-{second}"), Instant::now(), None));
        }
        for (tenant, since, first) in newcomers.iter_mut().filter(|n| n.2.is_none()) {
            let answer = steady.admit(request(tenant)).await.unwrap().into_inner();
            if admitted(&answer, tenant) {
                *first = Some(since.elapsed());
            }
        }
        if last_sample.elapsed() >= Duration::from_secs(1) {
            rss.push((
                started.elapsed().as_secs(),
                rss_kib(pid),
                sent.load(Ordering::Relaxed),
            ));
            last_sample = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(STEADY_EVERY_MS)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for s in sprayers {
        s.await.unwrap();
    }

    let sprayed = sent.load(Ordering::Relaxed);
    eprintln!("sprayed {sprayed} keys in {SPRAY_S} s; acme admitted {served} of {asked}");
    eprintln!("agent RSS before the spray: {rss_before} KiB; during (s, KiB, keys sent): {rss:?}");
    eprintln!("newcomers' first admission after: {newcomers:?}");
    eprintln!(
        "allocator RSS: {node_rss_before} KiB before, {} KiB after",
        rss_kib(node.0.id())
    );
    assert!(
        sprayed as usize > 2 * KEYS_MAX,
        "the spray overflowed the key table"
    );
    assert!(
        served * 100 >= asked * STEADY_ADMITTED_MIN_PCT,
        "acme admitted {served} of {asked} during the spray"
    );
    for (tenant, _, first) in &newcomers {
        let waited = first.unwrap_or_else(|| panic!("{tenant} never admitted: {newcomers:?}"));
        assert!(waited <= NEWCOMER_WAIT_MAX, "{tenant} waited {waited:?}");
    }
    assert_eq!(newcomers.len(), NEWCOMERS);
    // The table fills early; from then on memory stays level. Compare the last third of
    // the run with the peak of its middle third.
    let third = rss.len() / 3;
    let middle_peak = rss[third..2 * third].iter().map(|r| r.1).max().unwrap();
    let last_peak = rss[2 * third..].iter().map(|r| r.1).max().unwrap();
    assert!(
        last_peak <= middle_peak + middle_peak / 10,
        "agent RSS still growing: {middle_peak} KiB then {last_peak} KiB ({rss:?})"
    );
}

/// The second caller asks for a new key every this many milliseconds...
const OTHER_EVERY_MS: u64 = 50;
/// ...and asks for it again this long after, when it should hold a lease.
const OTHER_CHECK_AFTER: Duration = Duration::from_secs(1);
/// Least share of the second caller's keys holding a lease at their check, in percent.
const OTHER_SERVED_MIN_PCT: usize = 80;
/// First leases the fairness test's agent asks for per second: far fewer than the spray's
/// keys, twice the second caller's.
const FAIR_ACQUIRES_PER_S: u64 = 40;
/// How long each spray of the fairness test lasts.
const FAIR_SPRAY_S: u64 = 12;

/// The agent binary leasing from the insecure cluster at `server`, its gateway listeners
/// under mutual TLS with the certificates in `dir/certs`, so callers are told apart by
/// certificate; waits until it answers `caller`.
async fn start_agent_tls(dir: &std::path::Path, server: &str, caller: &ChannelFactory) -> Agent {
    let (grpc, http) = (free_port(), free_port());
    let c = dir.join("certs");
    let mut cmd = Command::new(process_support::agent_binary());
    cmd.args(["--allocator", server, "--insecure", "--holder-id", "gw-1"])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        // Room for every key of the test: past the table's bound new keys would share the
        // policy's overflow key instead of waiting for leases of their own.
        .args(["--keys-max", "200000"])
        // First leases scarcer than the spray's keys, whatever the machine's speed.
        .args(["--acquire-rate-max-per-s", &FAIR_ACQUIRES_PER_S.to_string()])
        .args(process_support::listen_tls_args(&c, "gw-1"));
    let proc = spawn_logged(cmd, &dir.join("agent-tls.log"));
    let grpc = format!("127.0.0.1:{grpc}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut client = AdmitServiceClient::new(caller.channel(&grpc).unwrap());
        if client.admit(request("warm-up")).await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent never answered over TLS"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Agent { proc, grpc }
}

fn caller(pki: &DevPki, name: &str) -> ChannelFactory {
    let transport = ClientTransport::MutualTls {
        pem: pki.tls_pem(Role::Agent, name).unwrap(),
        server_name: Some("localhost".into()),
    };
    ChannelFactory::new(ChannelSettings::default(), transport).unwrap()
}

/// Sprays new keys as `sprayer` for `FAIR_SPRAY_S` while `other` asks for each of its own
/// new keys once and again `OTHER_CHECK_AFTER` later: how many of those second asks were
/// admitted, of how many, and how many keys were sprayed. Keys are prefixed with `run`.
async fn fair_share(
    agent: &Agent,
    sprayer: &ChannelFactory,
    other: &ChannelFactory,
    run: &str,
) -> (usize, usize, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sprayers: Vec<_> = (0..SPRAYERS)
        .map(|i| {
            let ch = sprayer.channel(&agent.grpc).unwrap();
            tokio::spawn(spray(ch, i, Arc::clone(&stop), Arc::clone(&sent)))
        })
        .collect();
    let mut client = AdmitServiceClient::new(other.channel(&agent.grpc).unwrap());
    let mut asked: std::collections::VecDeque<(String, Instant)> = Default::default();
    let (mut checked, mut served) = (0, 0);
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(FAIR_SPRAY_S) {
        // The spray's first second fills the queues; keys asked from then on are counted.
        if started.elapsed() >= Duration::from_secs(1) {
            let key = format!("{run}-other-{n}");
            n += 1;
            client.admit(request(&key)).await.unwrap();
            asked.push_back((key, Instant::now()));
        }
        while asked
            .front()
            .is_some_and(|(_, at)| at.elapsed() >= OTHER_CHECK_AFTER)
        {
            let (key, _) = asked.pop_front().expect("present");
            let answer = client.admit(request(&key)).await.unwrap().into_inner();
            checked += 1;
            served += usize::from(admitted(&answer, &key));
        }
        tokio::time::sleep(Duration::from_millis(OTHER_EVERY_MS)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for s in sprayers {
        s.await.unwrap();
    }
    (served, checked, sent.load(Ordering::Relaxed))
}

/// First leases are shared out per caller, and callers are told apart by their client
/// certificates: a gateway asking once per key still gets leases while another sprays new
/// keys as fast as the agent answers. The same gateway behind the sprayer's certificate is
/// one caller with it, and then most of its keys wait behind the spray.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_asking_once_per_key_gets_first_leases_beside_a_spraying_one() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&[], &["gw-1", "sprayer", "other"], &[]);
    let pki = DevPki::generate(&spec, std::time::SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let (_node, server) = start_insecure_allocator(dir.path());
    let file = dir.path().join("api.yaml");
    std::fs::write(&file, POLICY).unwrap();
    let out = ctl_insecure(&server, &["policy", "apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let (sprayer, other) = (caller(&pki, "sprayer"), caller(&pki, "other"));
    let agent = start_agent_tls(dir.path(), &server, &other).await;

    let (apart, apart_checked, apart_sprayed) = fair_share(&agent, &sprayer, &other, "apart").await;
    let (together, together_checked, together_sprayed) =
        fair_share(&agent, &sprayer, &sprayer, "together").await;
    eprintln!(
        "own certificate: {apart} of {apart_checked} keys held a lease {OTHER_CHECK_AFTER:?} after their first ask \
         ({apart_sprayed} keys sprayed); the sprayer's certificate: {together} of {together_checked} \
         ({together_sprayed} sprayed)"
    );
    assert!(apart_checked >= 100, "{apart_checked} keys checked");
    assert!(
        apart_sprayed as usize > 4 * apart_checked,
        "the spray outnumbered the gateway's keys"
    );
    assert!(
        apart * 100 >= apart_checked * OTHER_SERVED_MIN_PCT,
        "{apart} of {apart_checked} of the gateway's keys held a lease"
    );
    // Told apart from the sprayer only by its certificate: sharing it loses most of that.
    assert!(
        together * 100 < together_checked * OTHER_SERVED_MIN_PCT / 2,
        "{together} of {together_checked} keys held a lease behind the sprayer's certificate: \
         the test's spray does not crowd out first leases"
    );
}
