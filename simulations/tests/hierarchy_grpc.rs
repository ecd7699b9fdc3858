//! The hierarchy on real sockets with mutual TLS: a root allocator, two regional allocators
//! that lease from it (the same binary code, configured with `upstream`), and agents that
//! lease from their region. Demand moves from one region to the other, then is in both; the total admitted
//! across every agent stays within B + r·T, credit follows demand across regions, and the
//! regions learn the policy from the root's watch stream.

mod hierarchy_support;

use hierarchy_support::agents::start_agent;
use hierarchy_support::{admin, start_region, start_root};
use leasehold_agent::engine::{AdmitRequest, Dimension};
use leasehold_common::policy::Policy;
use leasehold_common::time::Clock;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{DevPki, PkiSpec};
use std::time::{Duration, Instant, SystemTime};

const RATE: u64 = 1_000;
const BURST: u64 = 300;
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1000, per: 1s}\nburst: 300\nscope: global\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regions_sublease_root_credit_within_the_bound_while_demand_moves() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1", "eu-1", "us-1"], &["gw-eu", "gw-us"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();

    let root = start_root(dir.path(), &pki, POLICY).await;
    let regions = [
        start_region(dir.path(), &pki, &root, "eu", "api").await,
        start_region(dir.path(), &pki, &root, "us", "api").await,
    ];

    // A delegated cluster takes its policies from upstream only.
    let refused = admin(&pki, &regions[0].addr)
        .await
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: POLICY.replace("units: 1000", "units: 5000"),
            ..Default::default()
        })
        .await
        .expect_err("a region refuses local policy changes");
    assert!(refused.message().contains("delegated"), "{refused:?}");

    let policy = Policy::from_yaml(POLICY).unwrap();
    let agents = [
        start_agent(&pki, "gw-eu", &regions[0].addr, &policy),
        start_agent(&pki, "gw-us", &regions[1].addr, &policy),
    ];
    let started = Instant::now();
    let mut admitted = [0u64; 2];
    let run = Duration::from_millis(4_500);
    while started.elapsed() < run {
        // Demand in eu, then in us, then in both.
        let third = started.elapsed().as_millis() * 3 / run.as_millis();
        let busy: &[usize] = match third {
            0 => &[0],
            1 => &[1],
            _ => &[0, 1],
        };
        for &i in busy {
            let a = &agents[i];
            for _ in 0..40 {
                let entries = [("tenant", "acme")];
                let dims = [Dimension::policy("api", &entries)];
                if a.engine
                    .admit(&AdmitRequest::new(&dims), a.clock.now())
                    .allowed
                {
                    admitted[i] += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let bound = BURST + RATE * elapsed_ms / 1_000;
    let total = admitted[0] + admitted[1];
    eprintln!("admitted {admitted:?} of bound {bound} in {elapsed_ms} ms");
    assert!(
        total <= bound,
        "admitted {total} > B + r·T = {bound} ({admitted:?})"
    );
    assert!(
        admitted[0] > 200 && admitted[1] > 200,
        "credit followed demand between the regions: {admitted:?}"
    );
    assert!(
        total * 2 > bound,
        "most of the budget was usable through the regions: {total} of {bound}"
    );

    // The root sees each region as one holder, under its allocator holder id.
    let mut a = admin(&pki, &root.addr).await;
    let leases = a
        .list_leases(pb::ListLeasesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let holders: std::collections::BTreeSet<String> = leases
        .leases
        .iter()
        .filter_map(|l| l.lease.as_ref().map(|l| l.holder_id.clone()))
        .collect();
    assert!(
        holders.iter().all(|h| h.starts_with("alloc:")),
        "only regions hold root leases: {holders:?}"
    );

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
}
