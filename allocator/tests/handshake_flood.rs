//! The release binaries' TLS listeners under clients that connect and never send a
//! ClientHello, reconnecting whenever they are cut off: the allocator's gRPC listener, and
//! the agent's gRPC and HTTP listeners. Each listener holds few connections
//! (`connections_max` 64, so 16 handshakes at once, 4 per address), far fewer than the
//! silent clients, yet a client with a certificate of the CA, from another address, is
//! served within seconds every time it asks, and the evictions show in the metrics. Left to tonic's own TLS, every slot stayed taken by silent clients
//! until their 10 s handshake timeout, over and over.

mod process_support;

use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use leasehold_proto::transport::{
    rustls_client_config, ChannelFactory, ChannelSettings, ClientTransport, DevPki, PkiSpec, Role,
};
use process_support::{free_port, listen_tls_args, spawn_logged, Proc, ALLOCATOR};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONNECTIONS_MAX: usize = 64;
/// Silent clients per listener: several times its connection slots.
const SILENT: usize = 300;
/// How long a silent client waits to reconnect after being cut off.
const RECONNECT_MS: u64 = 20;
/// Longest an honest call may take, connection and handshake included.
const HONEST_WAIT: Duration = Duration::from_secs(3);
/// Honest calls made to each listener while the silent clients are at it.
const HONEST_CALLS: usize = 8;

/// Keeps `SILENT` connections to `addr` open without a byte sent, reopening each one
/// `RECONNECT_MS` after the server closes it, until `stop`; from 127.0.0.2, an address
/// of its own (honest clients connect from 127.0.0.1).
fn flood(addr: SocketAddr, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..SILENT)
        .map(|_| {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut cut_off = 0;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = connect_from(ATTACKER, addr).await else {
                        tokio::time::sleep(Duration::from_millis(RECONNECT_MS)).await;
                        continue;
                    };
                    let mut buf = [0u8; 64];
                    // Closed by the server (0 bytes or an error), or time to stop.
                    while !stop.load(Ordering::Relaxed) {
                        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf))
                            .await
                        {
                            Ok(Ok(0)) | Ok(Err(_)) => {
                                cut_off += 1;
                                break;
                            }
                            Ok(Ok(_)) | Err(_) => {}
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(RECONNECT_MS)).await;
                }
                cut_off
            })
        })
        .collect()
}

/// The silent clients' address.
const ATTACKER: [u8; 4] = [127, 0, 0, 2];

async fn connect_from(ip: [u8; 4], addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((ip, 0)))?;
    socket.connect(addr).await
}

fn factory(pki: &DevPki, role: Role, name: &str) -> ChannelFactory {
    let transport = ClientTransport::MutualTls {
        pem: pki.tls_pem(role, name).unwrap(),
        server_name: Some("localhost".into()),
    };
    ChannelFactory::new(ChannelSettings::default(), transport).unwrap()
}

/// One honest call on a new connection, timed; panics if it fails or takes too long.
async fn honest<F, Fut>(what: &str, call: F) -> Duration
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    match tokio::time::timeout(HONEST_WAIT, call()).await {
        Ok(Ok(())) => started.elapsed(),
        Ok(Err(e)) => panic!("{what}: an honest call failed during the flood: {e}"),
        Err(_) => panic!("{what}: an honest call took over {HONEST_WAIT:?} during the flood"),
    }
}

/// Makes `HONEST_CALLS` calls, 300 ms apart, while silent clients flood `addr`; returns
/// the slowest and how many times the silent clients were cut off.
async fn under_flood<F, Fut>(what: &str, addr: SocketAddr, mut call: F) -> (Duration, u64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let silent = flood(addr, Arc::clone(&stop));
    // Let the silent clients take their places first.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..HONEST_CALLS {
        slowest = slowest.max(honest(what, &mut call).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut cut_off = 0;
    for s in silent {
        cut_off += s.await.unwrap();
    }
    (slowest, cut_off)
}

/// The value of metric `name` in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// GET `path` on a plaintext HTTP port.
fn http_get(port: u16, path: &str) -> String {
    process_support::http_get(&format!("127.0.0.1:{port}"), path)
}

fn start_allocator(dir: &Path) -> (Proc, SocketAddr, u16) {
    start_allocator_with(dir, "")
}

/// The allocator with `listener_extra` added to its `listener:` settings.
fn start_allocator_with(dir: &Path, listener_extra: &str) -> (Proc, SocketAddr, u16) {
    let (grpc, http) = (free_port(), free_port());
    let (c, d) = (dir.join("certs"), dir.join("node"));
    let config = dir.join("node.yaml");
    std::fs::write(
        &config,
        format!(
            "node_id: 1\ncluster: global\ngrpc_addr: 127.0.0.1:{grpc}\nhttp_addr: 127.0.0.1:{http}\n\
             advertise_addr: 127.0.0.1:{grpc}\ndata_dir: {d}\nsigning_key: {d}/lease-key.p8\n\
             bootstrap: [{{id: 1, addr: \"127.0.0.1:{grpc}\"}}]\n\
             tls: {{ca: {c}/ca.pem, cert: {c}/allocator-global-1.pem, key: {c}/allocator-global-1-key.pem}}\n\
             listener: {{connections_max: {CONNECTIONS_MAX}{listener_extra}}}\n\
             raft: {{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}}\n",
            c = c.display(),
            d = d.display(),
        ),
    )
    .unwrap();
    let mut cmd = Command::new(ALLOCATOR);
    cmd.arg("-c").arg(&config);
    let proc = spawn_logged(cmd, &dir.join("node.log"));
    (proc, format!("127.0.0.1:{grpc}").parse().unwrap(), http)
}

async fn cluster_status(
    pki: &DevPki,
    addr: SocketAddr,
) -> Result<pb::ClusterStatusResponse, String> {
    // A new factory each time: a new connection, so a new handshake.
    let channel = factory(pki, Role::Admin, "ops")
        .channel(&addr.to_string())
        .map_err(|e| e.to_string())?;
    AdminServiceClient::new(channel)
        .cluster_status(pb::ClusterStatusRequest {})
        .await
        .map(|r| r.into_inner())
        .map_err(|e| e.to_string())
}

/// Waits until the one-node allocator at `addr` has elected itself.
async fn wait_elected(pki: &DevPki, addr: SocketAddr) {
    let started = Instant::now();
    while !cluster_status(pki, addr)
        .await
        .is_ok_and(|s| s.leader_id == 1)
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the allocator never elected itself"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_cannot_keep_an_admin_from_the_allocator() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1"], &[], &["ops"]);
    let pki = DevPki::generate(&spec, std::time::SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let (_node, addr, http) = start_allocator(dir.path());
    wait_elected(&pki, addr).await;

    let (slowest, cut_off) = under_flood("allocator", addr, || async {
        cluster_status(&pki, addr).await.map(|_| ())
    })
    .await;
    let metrics = http_get(http, "/metrics");
    let evicted = metric(&metrics, "leasehold_tls_handshakes_evicted_total");
    println!("allocator: slowest honest call {slowest:?}, silent clients cut off {cut_off} times, {evicted} handshakes evicted");
    assert!(
        evicted >= SILENT as u64,
        "{evicted} evictions for {SILENT} silent clients"
    );
    assert!(
        cut_off >= SILENT as u64,
        "silent clients were cut off {cut_off} times"
    );
}

fn start_agent(dir: &Path) -> (Proc, SocketAddr, u16) {
    let limits = dir.join("limits.yaml");
    std::fs::write(
        &limits,
        "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000}\n",
    )
    .unwrap();
    let (grpc, http) = (free_port(), free_port());
    let c = dir.join("certs");
    let mut cmd = Command::new(process_support::agent_binary());
    cmd.args(["--standalone", "--ratelimit-config"])
        .arg(&limits)
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--connections-max", &CONNECTIONS_MAX.to_string()])
        .args(listen_tls_args(&c, "gw-1"));
    let proc = spawn_logged(cmd, &dir.join("agent.log"));
    (proc, format!("127.0.0.1:{grpc}").parse().unwrap(), http)
}

async fn should_rate_limit(pki: &DevPki, addr: SocketAddr) -> Result<(), String> {
    let channel = factory(pki, Role::Agent, "edge")
        .channel(&addr.to_string())
        .map_err(|e| e.to_string())?;
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: "acme".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    RateLimitServiceClient::new(channel)
        .should_rate_limit(request)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A mutual TLS client presenting `role`/`name`'s certificate.
fn tls_connector(pki: &DevPki, role: Role, name: &str) -> tokio_rustls::TlsConnector {
    let config = rustls_client_config(&pki.tls_pem(role, name).unwrap()).unwrap();
    tokio_rustls::TlsConnector::from(config)
}

/// GET /healthz over mutual TLS as `edge` on a new connection.
async fn healthz_tls(pki: &DevPki, addr: SocketAddr) -> Result<(), String> {
    let out = get_tls(pki, addr, "/healthz").await?;
    if out.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(format!("answered {out}"))
    }
}

/// GET `path` over mutual TLS as `edge` on a new connection: the whole response.
async fn get_tls(pki: &DevPki, addr: SocketAddr, path: &str) -> Result<String, String> {
    use tokio_rustls::rustls::pki_types::ServerName;
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = tls_connector(pki, Role::Agent, "edge")
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    tls.read_to_end(&mut out).await.map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_cannot_keep_a_gateway_from_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&[], &["gw-1", "edge"], &[]);
    let pki = DevPki::generate(&spec, std::time::SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let (_agent, grpc, http_port) = start_agent(dir.path());
    let http: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let started = Instant::now();
    while should_rate_limit(&pki, grpc).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the agent never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (slowest, cut_off) =
        under_flood("agent gRPC", grpc, || should_rate_limit(&pki, grpc)).await;
    println!("agent gRPC: slowest honest call {slowest:?}, silent clients cut off {cut_off} times");
    assert!(
        cut_off >= SILENT as u64,
        "silent clients were cut off {cut_off} times"
    );
    let (slowest, cut_off) = under_flood("agent HTTP", http, || healthz_tls(&pki, http)).await;
    println!("agent HTTP: slowest honest call {slowest:?}, silent clients cut off {cut_off} times");
    assert!(
        cut_off >= SILENT as u64,
        "silent clients were cut off {cut_off} times"
    );

    // The agent's metrics are on its TLS HTTP listener, now quiet.
    let metrics = get_tls(&pki, http, "/metrics").await.unwrap();
    let evicted = metric(&metrics, "leasehold_agent_tls_handshakes_evicted_total");
    assert!(
        evicted >= 2 * SILENT as u64,
        "{evicted} evictions for {SILENT} silent clients on each listener"
    );
}

/// Opens `n` connections to `addr` as `agent/greedy`, each through its handshake, and keeps
/// those the server does not close: how many it kept.
async fn hold_connections(pki: &DevPki, addr: SocketAddr, n: usize) -> Vec<impl Sized> {
    use tokio_rustls::rustls::pki_types::ServerName;
    let connector = tls_connector(pki, Role::Agent, "greedy");
    let mut held = Vec::new();
    for _ in 0..n {
        let Ok(tcp) =
            tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(addr)).await
        else {
            break;
        };
        let name = ServerName::try_from("localhost").unwrap();
        let connect = connector.connect(name, tcp.unwrap());
        match tokio::time::timeout(Duration::from_millis(500), connect).await {
            Ok(Ok(tls)) => held.push(tls),
            Ok(Err(_)) => {}
            // The listener is full: nothing more to take.
            Err(_) => break,
        }
    }
    // Keep those the server has not closed a moment after their handshake.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut open = Vec::new();
    for mut tls in held {
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(20), tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {}
            _ => open.push(tls),
        }
    }
    open
}

/// A holder of one certificate of the CA opening connection after connection keeps at most
/// `listener.connections_per_peer_max` of them, and the allocator's other callers theirs.
/// With the bound set as high as it goes the same client takes every slot and an admin
/// cannot connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_certificate_cannot_take_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1"], &["greedy"], &["ops"]);
    let pki = DevPki::generate(&spec, std::time::SystemTime::now()).unwrap();
    for (per_peer, bounded) in [(8, true), (1_000_000, false)] {
        let run = dir.path().join(format!("per-peer-{per_peer}"));
        std::fs::create_dir_all(&run).unwrap();
        pki.write_to(&run.join("certs"), true).unwrap();
        let extra = format!(", connections_per_peer_max: {per_peer}");
        let (_node, addr, http) = start_allocator_with(&run, &extra);
        wait_elected(&pki, addr).await;
        let held = hold_connections(&pki, addr, 2 * CONNECTIONS_MAX).await;
        let answered = tokio::time::timeout(HONEST_WAIT, cluster_status(&pki, addr)).await;
        println!(
            "connections_per_peer_max {per_peer}: one certificate kept {} of {} connections; an admin's call answered: {}",
            held.len(),
            2 * CONNECTIONS_MAX,
            matches!(answered, Ok(Ok(_)))
        );
        if bounded {
            assert_eq!(held.len(), per_peer, "connections one certificate kept");
            assert!(matches!(answered, Ok(Ok(_))), "{answered:?}");
            let metrics = http_get(http, "/metrics");
            let over = metric(&metrics, "leasehold_tls_connections_over_peer_limit_total");
            assert!(over >= (2 * CONNECTIONS_MAX - per_peer) as u64, "{over}");
        } else {
            assert!(held.len() >= CONNECTIONS_MAX - 2, "{} kept", held.len());
            assert!(
                !matches!(answered, Ok(Ok(_))),
                "the admin got through a full listener"
            );
        }
        drop(held);
    }
}
