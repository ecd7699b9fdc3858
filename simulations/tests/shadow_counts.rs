//! Shadow mode end to end: an agent enforcing a shadow-mode policy with leased credit
//! admits everything, counts per lease what the policy would have denied, and reports it on
//! its renewals; the allocator sums the reports per policy version and `leasectl policy get`
//! shows the sum, which never exceeds what the agent counted.

mod hierarchy_support;

use hierarchy_support::agents::start_agent;
use hierarchy_support::leasectl::{json, leasectl};
use hierarchy_support::start_root;
use leasehold_agent::engine::{AdmitRequest, Dimension};
use leasehold_common::policy::Policy;
use leasehold_common::time::Clock;
use leasehold_proto::transport::{DevPki, PkiSpec};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 200, per: 1s}\nburst: 100\nscope: global\nmode: shadow\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";

async fn leasectl_policy_get(dir: &Path, server: &str) -> serde_json::Value {
    let args = ["policy", "get", "api", "-o", "json"];
    let mut cmd = leasectl(dir, server, "admin-ops", &args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    json(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_would_deny_counts_reach_policy_get() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1"], &["gw-1"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let root = start_root(dir.path(), &pki, POLICY).await;
    let addr = root.addr.clone();
    let policy = Policy::from_yaml(POLICY).unwrap();
    let agent = start_agent(&pki, "gw-1", &addr, &policy);
    let (engine, clock) = (&agent.engine, &agent.clock);

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

    agent.shut_down().await;
    root.shut_down().await;
}
