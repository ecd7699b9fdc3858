//! A holder spraying Acquire for new keys straight at the allocator binary: past
//! `ledger.keys_max` new keys are refused `RESOURCE_EXHAUSTED`, naming the bound, the
//! node's memory levels off there, and existing keys are still granted to other holders.

mod process_support;

use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_client::LeaseServiceClient;
use process_support::{ctl_insecure, insecure_node_config, start_node};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::transport::Channel;

const KEYS_MAX: usize = 5_000;
const SPRAYED: u64 = 15_000;
const SPRAYERS: u64 = 8;
/// Long enough that no lease of the spray expires during the test.
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\n\
    rate: {units: 1000000, per: 1s}\nburst: 1000000\nscope: global\n\
    lease: {ttl: 120s, refresh_horizon: 1s, reserve_fraction: 0}\n";

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn acquire(holder: &str, tenant: &str, request_id: u64) -> pb::AcquireRequest {
    pb::AcquireRequest {
        holder_id: holder.into(),
        policy_id: "api".into(),
        key: format!("api:tenant={tenant}"),
        want_credit: 1,
        request_id,
        ..Default::default()
    }
}

#[derive(Default)]
struct Tally {
    granted: AtomicU64,
    refused: AtomicU64,
}

async fn spray(channel: Channel, from: u64, tally: Arc<Tally>) {
    let mut client = LeaseServiceClient::new(channel);
    let holder = format!("spray-{from}");
    for (i, n) in (from..SPRAYED).step_by(SPRAYERS as usize).enumerate() {
        match client
            .acquire(acquire(&holder, &format!("t{n}"), i as u64 + 1))
            .await
        {
            Ok(_) => tally.granted.fetch_add(1, Ordering::Relaxed),
            Err(s) => {
                assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
                assert!(s.message().contains("keys"), "{s:?}");
                tally.refused.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_keys_past_the_ledger_bound_are_refused_and_memory_levels_off() {
    let dir = tempfile::tempdir().unwrap();
    let raft = "{heartbeat_ms: 50, election_min_ms: 200, election_max_ms: 400}";
    let (config, server) = insecure_node_config(dir.path(), raft);
    let text = std::fs::read_to_string(&config).unwrap();
    let ledger = format!(
        "ledger: {{keys_max: {KEYS_MAX}, leases_max: {}}}\n",
        4 * KEYS_MAX
    );
    std::fs::write(&config, text + &ledger).unwrap();
    let node = start_node(&config, &server, &dir.path().join("node.log"));
    let file = dir.path().join("api.yaml");
    std::fs::write(&file, POLICY).unwrap();
    let out = ctl_insecure(&server, &["policy", "apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let channel = Channel::from_shared(format!("http://{server}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let pid = node.0.id();
    let before = rss_kib(pid);

    // A third of the spray fills the ledger; the rest must not grow the node.
    let tally = Arc::new(Tally::default());
    let mut samples = Vec::new();
    let tasks: Vec<_> = (0..SPRAYERS)
        .map(|i| tokio::spawn(spray(channel.clone(), i, Arc::clone(&tally))))
        .collect();
    let mut at_bound = None;
    while tasks.iter().any(|t| !t.is_finished()) {
        let done = tally.granted.load(Ordering::Relaxed) + tally.refused.load(Ordering::Relaxed);
        let rss = rss_kib(pid);
        if at_bound.is_none() && tally.refused.load(Ordering::Relaxed) > 0 {
            at_bound = Some(rss);
        }
        samples.push((done, rss));
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let after = rss_kib(pid);
    let (granted, refused) = (
        tally.granted.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
    );
    eprintln!(
        "granted {granted}, refused {refused}; RSS {before} KiB before, {at_bound:?} KiB at the \
         bound, {after} KiB after; samples (calls, KiB): {samples:?}"
    );
    assert_eq!(
        granted, KEYS_MAX as u64,
        "one key per grant, up to the bound"
    );
    assert_eq!(granted + refused, SPRAYED);
    let at_bound = at_bound.expect("the bound was reached while sampling");
    assert!(
        after <= at_bound + at_bound / 10,
        "the node kept growing past the bound: {at_bound} KiB then {after} KiB"
    );

    // A key the ledger holds is still granted to another holder.
    let mut client = LeaseServiceClient::new(channel);
    let lease = client
        .acquire(acquire("gw-honest", "t0", 1))
        .await
        .expect("an existing key is granted past the key bound");
    assert!(lease.into_inner().lease.is_some());
}
