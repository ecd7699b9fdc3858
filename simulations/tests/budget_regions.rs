//! A budget split across two real regions: a root allocator and two regional allocators
//! that lease from it over mutual TLS, each with an agent whose demand far exceeds the
//! whole budget. `leasectl budget split` at the root gives `alloc:eu` and `alloc:us`
//! weights 3:1; the root shows the regions with their weights, both regions receive credit
//! and the total admitted stays within B + r·T.
//!
//! With both regions saturated, the root hands them credit 3:1 over time: each earns its
//! weighted share continuously and what the other has earned is held for it, so how often a
//! region comes back does not decide the split.

mod hierarchy_support;

use hierarchy_support::agents::{start_agent, Agent};
use hierarchy_support::{start_region, start_root};
use leasehold_agent::engine::{AdmitRequest, Dimension};
use leasehold_common::policy::Policy;
use leasehold_common::time::Clock;
use leasehold_proto::transport::{DevPki, PkiSpec};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

const RATE: u64 = 1_000;
const BURST: u64 = 300;
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1000, per: 1s}\nburst: 300\nscope: global\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";
/// Time for both regions to compete and the root's shares to settle, then the measured span.
const WARM_UP: Duration = Duration::from_millis(1_500);
const RUN: Duration = Duration::from_millis(5_000);

/// Runs `leasectl` with the admin certificate against `server`; returns its JSON output.
async fn leasectl(dir: &Path, server: &str, args: &[&str]) -> serde_json::Value {
    let mut cmd = hierarchy_support::leasectl::leasectl(dir, server, "admin-ops", args);
    cmd.args(["-o", "json"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    hierarchy_support::leasectl::json(&out)
}

/// Offers both agents far more than the whole budget for `RUN`; returns what each admitted
/// in all and after `WARM_UP`, and the elapsed time in milliseconds.
async fn saturate(agents: &[Agent; 2]) -> ([u64; 2], [u64; 2], u64) {
    let started = Instant::now();
    let (mut total, mut measured) = ([0u64; 2], [0u64; 2]);
    // Admitted per half second, printed to show how the shares settle.
    let mut per_half = vec![[0u64; 2]; 12];
    while started.elapsed() < RUN {
        let warm = started.elapsed() >= WARM_UP;
        for (i, a) in agents.iter().enumerate() {
            for _ in 0..40 {
                let entries = [("tenant", "acme")];
                let dims = [Dimension::policy("api", &entries)];
                if a.engine
                    .admit(&AdmitRequest::new(&dims), a.clock.now())
                    .allowed
                {
                    total[i] += 1;
                    per_half[(started.elapsed().as_millis() / 500) as usize % 12][i] += 1;
                    measured[i] += u64::from(warm);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!("per half second: {per_half:?}");
    (total, measured, started.elapsed().as_millis() as u64)
}

/// What a run of two saturated regions under a 3:1 split produced.
struct SplitRun {
    /// Admitted per region (eu, us) over the whole run, and after the warm-up.
    total: [u64; 2],
    measured: [u64; 2],
    elapsed_ms: u64,
    /// The root's budget tree children: (holder id, weight).
    weights: Vec<(String, u64)>,
}

async fn split_and_saturate() -> SplitRun {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1", "eu-1", "us-1"], &["gw-eu", "gw-us"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();

    let root = start_root(dir.path(), &pki, POLICY).await;
    let split = leasectl(
        dir.path(),
        &root.addr,
        &[
            "budget",
            "split",
            "api",
            "--share",
            "alloc:eu=3",
            "--share",
            "alloc:us=1",
        ],
    )
    .await;
    let rates: Vec<_> = split["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["rate_per_sec"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rates,
        [
            ("alloc:eu".to_string(), 750.0),
            ("alloc:us".to_string(), 250.0)
        ]
    );

    let regions = [
        start_region(dir.path(), &pki, &root, "eu", "api").await,
        start_region(dir.path(), &pki, &root, "us", "api").await,
    ];

    let policy = Policy::from_yaml(POLICY).unwrap();
    let agents = [
        start_agent(&pki, "gw-eu", &regions[0].addr, &policy),
        start_agent(&pki, "gw-us", &regions[1].addr, &policy),
    ];
    let (total, measured, elapsed_ms) = saturate(&agents).await;
    eprintln!("admitted {total:?} (after warm-up {measured:?}) in {elapsed_ms} ms");

    let shown = leasectl(dir.path(), &root.addr, &["budget", "show", "api"]).await;
    let weights = shown["root"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["weight"].as_u64().unwrap(),
            )
        })
        .collect();

    for a in &agents {
        a.stop.send(true).unwrap();
    }
    for a in agents {
        a.task.await.unwrap();
    }
    for n in regions.into_iter().chain([root]) {
        n.stop.send(true).unwrap();
        n.task.await.unwrap();
    }
    SplitRun {
        total,
        measured,
        elapsed_ms,
        weights,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_to_one_split_across_two_regions_keeps_the_bound_and_splits_three_to_one() {
    let run = split_and_saturate().await;
    let bound = BURST + RATE * run.elapsed_ms / 1_000;
    let sum = run.total[0] + run.total[1];
    assert!(
        sum <= bound,
        "admitted {sum} > B + r·T = {bound} ({:?})",
        run.total
    );
    // How much of the bound is reached depends on how busy the machine is (it was 53–90 %
    // on two shared cores); well under half would mean credit is stuck somewhere.
    assert!(
        sum * 10 > bound * 4,
        "the split budget stayed usable through the regions: {sum} of {bound}"
    );
    assert!(
        run.measured.iter().all(|m| *m > 0),
        "both regions received credit: {:?}",
        run.measured
    );
    // Both saturated: three to one within a tolerance, compared in integers:
    // 2 ≤ eu / us ≤ 4.5.
    let [eu, us] = run.measured;
    assert!(
        eu >= us * 2 && eu * 2 <= us * 9,
        "eu:us = {eu}:{us}, not close to 3:1"
    );
    // The root sees each region as one holder, with the weight the split gave it.
    assert_eq!(
        run.weights,
        [("alloc:eu".to_string(), 3), ("alloc:us".to_string(), 1)]
    );
}
