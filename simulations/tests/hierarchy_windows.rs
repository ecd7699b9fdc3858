//! Window credit sub-leased through a region ends with its window: the region releases its
//! root lease with the exact usage once its agents' leases under it have settled, so a
//! healthy hierarchy strands nothing at the root and usage there matches what was admitted.

mod hierarchy_support;

use hierarchy_support::agents::start_agent;
use hierarchy_support::{admin, start_region, start_root};
use leasehold_agent::engine::{AdmitRequest, Dimension};
use leasehold_common::policy::Policy;
use leasehold_common::time::Clock;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{DevPki, PkiSpec};
use std::time::{Duration, Instant, SystemTime};

const LIMIT: u64 = 200;
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nalgorithm: fixed_window\nrate: {units: 200, per: 1s}\nscope: global\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";
/// Whole windows the agent is busy for.
const BUSY_MS: u64 = 4_500;
/// At most one unit in this many admitted may be stranded.
const STRANDED_MAX_PARTS: u64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_credit_through_a_region_is_released_not_stranded() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1", "eu-1"], &["gw-eu"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let root = start_root(dir.path(), &pki, POLICY).await;
    let region = start_region(dir.path(), &pki, &root, "eu", "api").await;

    let since_ms = unix_ms();
    let agent = start_agent(
        &pki,
        "gw-eu",
        &region.addr,
        &Policy::from_yaml(POLICY).unwrap(),
    );
    let started = Instant::now();
    let mut admitted = 0u64;
    // Units admitted and the first admission's offset, per window, for the failure message.
    let mut windows = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    while started.elapsed() < Duration::from_millis(BUSY_MS) {
        for _ in 0..20 {
            let dims = [Dimension::policy("api", &[("tenant", "acme")])];
            let req = AdmitRequest::new(&dims);
            if agent.engine.admit(&req, agent.clock.now()).allowed {
                admitted += 1;
                let now = unix_ms();
                windows.entry(now / 1_000).or_insert((0, now % 1_000)).0 += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Demand far above the limit for several windows: most of each was admitted, so the
    // check below is about credit that was really leased.
    assert!(
        admitted >= 3 * LIMIT,
        "admitted {admitted}; per window (units, first at ms): {windows:?}"
    );

    // The last window ends, its leases settle and the root's grace passes.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let usage = admin(&pki, &root.addr)
        .await
        .usage(pb::UsageRequest {
            policy_id: "api".into(),
            since_ms: since_ms - 60_000,
            until_ms: unix_ms() + 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let total = usage.total.unwrap_or_default();
    eprintln!("agent admitted {admitted}, per window (units, first at ms) {windows:?}; root booked {total:?}");
    // Before the region released its ended leases, what it held at each window's end was
    // written off: 99 to 200 units in three of four runs (5 in the fourth, whose windows
    // ended with little held). A region or agent starved of CPU may still miss a window's
    // end now and then: a few units, not a window's leftover.
    assert!(
        total.stranded * STRANDED_MAX_PARTS <= admitted,
        "window credit stranded at the root: {} of {admitted} admitted",
        total.stranded
    );
    assert_eq!(
        total.admitted, admitted,
        "the root's usage is what the agent admitted"
    );

    agent.stop.send(true).unwrap();
    agent.task.await.unwrap();
    region.shut_down().await;
    root.shut_down().await;
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
