//! Load generator: lease grants through the lease service of a cluster of the
//! `leasehold-allocator` binary (as built for this bench: release), over mutual TLS, from
//! many holders, and the capacity model's check (seed §9: allocator requests/s ≈ admitted
//! units/s ÷ average lease size).
//!
//! `cargo bench -p leasehold-allocator --bench grants_e2e -- [--seconds S] [--holders H]
//! [--keys K] [--lease-units Q] [--renewals N] [--demand-per-sec D] [--region-nodes R]
//! [--disk-every-s S]`
//!
//! Three root nodes run as processes, every log append fsynced, with certificates from a
//! fresh development PKI. `--holders` holders (each its own certificate and connection,
//! following the leader as agents do) share `--keys` keys out between them and cycle through
//! their keys: acquire `--lease-units` of credit, spend it all and renew for as much again
//! `--renewals` times, then release, telling the grantor a demand of `--demand-per-sec` units
//! a second on the key (default: one such cycle a second), as agents report what they
//! measure; a region sizes what it asks its upstream for from that. With `--region-nodes` above 0 a region cluster of that
//! many nodes leases from the root and the holders lease from the region, so the root serves
//! the region alone.
//!
//! Reported: grants/s (acquires and renewals that granted credit) with the latency of each
//! (p50, p99, max), every call the holders made, and per cluster the §9 figures from its
//! `/metrics` (lease calls served, credit granted, credit reported used) over the run.
//! With `--disk-every-s` above 0, the root nodes' data directories' sizes every that many
//! seconds: sled's growth under key churn.

#[path = "load/cluster.rs"]
mod cluster;
#[path = "load/disk.rs"]
mod disk;
mod load;

use cluster::{channels, scrape, ProcessCluster, Scrape, POLICY};
use leasehold_client::{Grantor, RemoteGrantor};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{DevPki, PkiSpec, Role};
use load::{arg, Latencies};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Longest a holder waits after a denied acquire, in milliseconds.
const RETRY_MS_MAX: u64 = 100;

/// What the holders did, all together.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    grants: AtomicU64,
    credit: AtomicU64,
    spent: AtomicU64,
}

/// One holder's cycle through its keys until stopped; the latency of each grant.
async fn holder(
    name: String,
    grantor: RemoteGrantor,
    keys: Vec<String>,
    (units, renewals, demand_milli): (u64, u64, u64),
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let mut request_id = 0;
    let mut next_id = || {
        request_id += 1;
        request_id
    };
    let granted = |latencies: &mut Vec<Duration>, t: Instant, credit: u64| {
        latencies.push(t.elapsed());
        tally.grants.fetch_add(1, Ordering::Relaxed);
        tally.credit.fetch_add(credit, Ordering::Relaxed);
    };
    for key in keys.iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let t = Instant::now();
        let req = pb::AcquireRequest {
            holder_id: name.clone(),
            policy_id: "api".into(),
            key: key.clone(),
            want_credit: units,
            demand_milli_units_per_sec: demand_milli,
            request_id: next_id(),
            ..Default::default()
        };
        tally.calls.fetch_add(1, Ordering::Relaxed);
        let answer = grantor.acquire(req).await;
        let Some(mut lease) = answer.as_ref().ok().and_then(|r| r.lease.clone()) else {
            // As an agent does: wait as asked before the next first lease (a region
            // fetching credit from its upstream asks for a moment).
            let wait_ms = answer.map_or(RETRY_MS_MAX, |r| r.retry_after_ms.min(RETRY_MS_MAX));
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            continue;
        };
        granted(&mut latencies, t, lease.credit);
        for _ in 0..renewals {
            let (before, t) = (lease.credit, Instant::now());
            let req = pb::ReportRequest {
                holder_id: name.clone(),
                lease_id: lease.lease_id,
                used: lease.credit,
                want_credit: units,
                demand_milli_units_per_sec: demand_milli,
                request_id: next_id(),
                ..Default::default()
            };
            tally.calls.fetch_add(1, Ordering::Relaxed);
            match grantor.report(req).await.ok().and_then(|r| r.lease) {
                Some(renewed) if renewed.credit > before => {
                    granted(&mut latencies, t, renewed.credit - before);
                    lease = renewed;
                }
                _ => break,
            }
        }
        let req = pb::ReleaseRequest {
            holder_id: name.clone(),
            lease_id: lease.lease_id,
            final_used: lease.credit,
            request_id: next_id(),
            ..Default::default()
        };
        tally.calls.fetch_add(1, Ordering::Relaxed);
        if grantor.release(req).await.is_ok() {
            tally.spent.fetch_add(lease.credit, Ordering::Relaxed);
        }
    }
    latencies
}

/// Prints one cluster's §9 figures over the run: lease calls served against the credit
/// reported used ÷ the credit granted per granting call.
fn print_model(name: &str, before: &Scrape, after: &Scrape, seconds: f64) {
    let calls = after.lease_calls - before.lease_calls;
    let granting = after.granting_calls - before.granting_calls;
    let granted = after.granted - before.granted;
    let used = after.used - before.used;
    let lease_size = granted as f64 / granting.max(1) as f64;
    let predicted = used as f64 / lease_size.max(1.0) / seconds;
    let served = calls as f64 / seconds;
    println!(
        "{name}: {served:.0} lease calls/s served; used {:.0} units/s ÷ {lease_size:.1} units \
         per granting call = {predicted:.0}/s predicted ({:+.1} %)",
        used as f64 / seconds,
        (served / predicted.max(1.0) - 1.0) * 100.0
    );
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let seconds = arg("--seconds", 10);
    let holders = arg("--holders", 200).max(1);
    let keys = arg("--keys", 4_000).max(holders);
    let units = arg("--lease-units", 10).max(1);
    let renewals = arg("--renewals", 10);
    let demand = arg("--demand-per-sec", units * (renewals + 1));
    let region_nodes = arg("--region-nodes", 0);
    let disk_every_s = arg("--disk-every-s", 0);

    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..holders).map(|h| format!("h{h}")).collect();
    let names_ref: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut allocators = vec!["global-1", "global-2", "global-3"];
    let region_names: Vec<String> = (1..=region_nodes)
        .map(|i| format!("region-eu-{i}"))
        .collect();
    allocators.extend(region_names.iter().map(String::as_str));
    let spec = PkiSpec::local(&allocators, &names_ref, &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let admin = channels(&pki, Role::Admin, "ops");

    let bin = env!("CARGO_BIN_EXE_leasehold-allocator");
    let root = ProcessCluster::start(bin, dir.path(), "global", 3, &[]);
    root.wait_leader(&admin).await;
    root.apply_policy(&admin, POLICY).await;
    let region = (region_nodes > 0)
        .then(|| ProcessCluster::start(bin, dir.path(), "region-eu", region_nodes, &root.addrs()));
    if let Some(region) = &region {
        region.wait_leader(&admin).await;
        region.wait_policy(&admin, "api").await;
    }
    let serving = region.as_ref().unwrap_or(&root);

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clusters: Vec<(&str, &ProcessCluster)> = std::iter::once(("root", &root))
        .chain(region.as_ref().map(|r| ("region", r)))
        .collect();
    let before: Vec<Scrape> = clusters.iter().map(|(_, c)| scrape(c)).collect();
    let sampler = (disk_every_s > 0).then(|| {
        let dirs = (1..=3).map(|i| dir.path().join(format!("global-{i}")));
        tokio::spawn(disk::sample(
            dirs.collect(),
            disk_every_s,
            Arc::clone(&stop),
        ))
    });
    let started = Instant::now();
    let latencies = Latencies::run(seconds, Arc::clone(&stop), || {
        names
            .iter()
            .enumerate()
            .map(|(h, name)| {
                let mine = (h as u64..keys)
                    .step_by(holders as usize)
                    .map(|k| format!("api:tenant=t{k}"))
                    .collect();
                let grantor =
                    RemoteGrantor::new(channels(&pki, Role::Agent, name), serving.addrs(), 3);
                tokio::spawn(holder(
                    name.clone(),
                    grantor,
                    mine,
                    (units, renewals, demand.saturating_mul(1_000)),
                    Arc::clone(&tally),
                    Arc::clone(&stop),
                ))
            })
            .collect()
    })
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    let after: Vec<Scrape> = clusters.iter().map(|(_, c)| scrape(c)).collect();
    println!(
        "3-node root{} over mutual TLS, fsync on append; {holders} holders, {keys} keys, \
         leases of {units} units renewed {renewals} times; {seconds} s",
        region.as_ref().map_or(String::new(), |_| format!(
            ", {region_nodes}-node region between it and the holders"
        )),
    );
    latencies.print("grant");
    let calls = tally.calls.load(Ordering::Relaxed);
    let grants = tally.grants.load(Ordering::Relaxed);
    println!(
        "holders: {calls} calls ({:.0}/s), {grants} grants, {} units granted, {} spent and \
         released",
        calls as f64 / elapsed,
        tally.credit.load(Ordering::Relaxed),
        tally.spent.load(Ordering::Relaxed),
    );
    for (((name, _), b), a) in clusters.iter().zip(&before).zip(&after) {
        print_model(name, b, a, elapsed);
    }
    if let Some(sampler) = sampler {
        let _ = sampler.await;
    }
}
