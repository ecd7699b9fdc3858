//! Load generator: how many batched lease calls one Raft group applies, through the lease
//! service of a 3-node cluster of the `leasehold-allocator` binary (release), over mutual
//! TLS, every append fsynced. This is the ceiling a root meets when regions send every
//! key's report of a round in one `LeaseBatch`.
//!
//! `cargo bench -p leasehold-allocator --bench batched_reports -- [--seconds S]
//! [--holders H] [--keys-per-holder K] [--batch B]`
//!
//! `--holders` holders (each its own certificate and connection, following the leader)
//! first acquire `--keys-per-holder` keys each, in batches of `--batch` calls, then, until
//! stopped, report on all of them over and over, a batch at a time: each report states the
//! whole lease spent and renews it for 10 units more, as a region renewing its upstream
//! leases does. Closed loop: each holder sends its next batch when the last is answered,
//! so the rate is what the cluster can apply. Reported: batches/s and their latency, and
//! the renewals (grants) per second inside them.

// Shared with grants_e2e, which uses all of it.
#[allow(dead_code)]
#[path = "load/cluster.rs"]
mod cluster;
mod load;

use cluster::{channels, scrape, ProcessCluster, POLICY};
use leasehold_client::{Grantor, RemoteGrantor, LEASE_BATCH_ITEMS_MAX};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{DevPki, PkiSpec, Role};
use load::{arg, Latencies};
use pb::lease_batch_item::Call;
use pb::lease_batch_outcome::Outcome;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Credit asked for by every acquire and every renewal.
const UNITS: u64 = 10;

#[derive(Clone)]
struct Held {
    lease_id: u64,
    credit: u64,
}

fn item(call: Call) -> pb::LeaseBatchItem {
    pb::LeaseBatchItem { call: Some(call) }
}

/// Acquires `keys` in batches of `batch`; the leases granted.
async fn acquire_all(
    grantor: &RemoteGrantor,
    name: &str,
    keys: &[String],
    batch: usize,
    request_id: &mut u64,
) -> Vec<Held> {
    let mut held = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(batch) {
        let items = chunk
            .iter()
            .map(|key| {
                *request_id += 1;
                item(Call::Acquire(pb::AcquireRequest {
                    policy_id: "api".into(),
                    key: key.clone(),
                    want_credit: UNITS,
                    request_id: *request_id,
                    ..Default::default()
                }))
            })
            .collect();
        let req = pb::LeaseBatchRequest {
            holder_id: name.into(),
            items,
        };
        let resp = grantor.lease_batch(req).await.expect("acquire batch");
        for o in resp.outcomes {
            let Some(Outcome::Acquired(a)) = o.outcome else {
                panic!("not acquired: {o:?}");
            };
            let l = a.lease.expect("granted");
            held.push(Held {
                lease_id: l.lease_id,
                credit: l.credit,
            });
        }
    }
    held
}

/// One holder: acquires its keys, then renews them batch after batch until stopped; the
/// latency of each batch.
async fn holder(
    name: String,
    grantor: RemoteGrantor,
    keys: Vec<String>,
    batch: usize,
    grants: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Vec<Duration> {
    let mut request_id = 0;
    let mut held = acquire_all(&grantor, &name, &keys, batch, &mut request_id).await;
    let mut latencies = Vec::new();
    'run: loop {
        for chunk in held.chunks_mut(batch) {
            if stop.load(Ordering::Relaxed) {
                break 'run;
            }
            let items = chunk
                .iter()
                .map(|h| {
                    request_id += 1;
                    item(Call::Report(pb::ReportRequest {
                        lease_id: h.lease_id,
                        used: h.credit,
                        want_credit: UNITS,
                        request_id,
                        ..Default::default()
                    }))
                })
                .collect();
            let req = pb::LeaseBatchRequest {
                holder_id: name.clone(),
                items,
            };
            let t = Instant::now();
            let Ok(resp) = grantor.lease_batch(req).await else {
                continue;
            };
            latencies.push(t.elapsed());
            for (o, h) in resp.outcomes.into_iter().zip(chunk.iter_mut()) {
                if let Some(Outcome::Reported(r)) = o.outcome {
                    if let Some(l) = r.lease.filter(|l| l.credit > h.credit) {
                        h.credit = l.credit;
                        grants.fetch_add(1, Ordering::Relaxed);
                    }
                }
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
    let holders = arg("--holders", 8).max(1);
    let per_holder = arg("--keys-per-holder", 4_096).max(1);
    let batch =
        (arg("--batch", LEASE_BATCH_ITEMS_MAX as u64) as usize).clamp(1, LEASE_BATCH_ITEMS_MAX);

    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..holders).map(|h| format!("h{h}")).collect();
    let names_ref: Vec<&str> = names.iter().map(String::as_str).collect();
    let spec = PkiSpec::local(&["global-1", "global-2", "global-3"], &names_ref, &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let admin = channels(&pki, Role::Admin, "ops");
    let bin = env!("CARGO_BIN_EXE_leasehold-allocator");
    let root = ProcessCluster::start(bin, dir.path(), "global", 3, &[]);
    root.wait_leader(&admin).await;
    root.apply_policy(&admin, POLICY).await;

    let grants = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let before = scrape(&root);
    let latencies = Latencies::run(seconds, Arc::clone(&stop), || {
        names
            .iter()
            .map(|name| {
                let keys = (0..per_holder)
                    .map(|k| format!("api:tenant={name}-{k}"))
                    .collect();
                let grantor =
                    RemoteGrantor::new(channels(&pki, Role::Agent, name), root.addrs(), 3);
                tokio::spawn(holder(
                    name.clone(),
                    grantor,
                    keys,
                    batch,
                    Arc::clone(&grants),
                    Arc::clone(&stop),
                ))
            })
            .collect()
    })
    .await;
    let after = scrape(&root);
    println!(
        "3-node root over mutual TLS, fsync on append; {holders} holders x {per_holder} keys, \
         batches of {batch} reports; {seconds} s (the first acquires included)"
    );
    latencies.print("batch");
    let g = grants.load(Ordering::Relaxed);
    println!("renewals granted: {g} ({:.0}/s)", g as f64 / seconds as f64);
    println!(
        "root: {:.0} units/s granted, {:.0} units/s reported used (its /metrics)",
        (after.granted - before.granted) as f64 / seconds as f64,
        (after.used - before.used) as f64 / seconds as f64,
    );
}
