//! Exact decisions across the hierarchy on real sockets with mutual TLS: a region forwards
//! decisions on a policy owned by the root, so an agent of the region and an agent of the
//! root share the root's one count and together admit exactly the limit.

mod hierarchy_support;

use hierarchy_support::{channels, start_region, start_root};
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::exact::ExactGate;
use leasehold_client::{Grantor, RemoteGrantor};
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::transport::{DevPki, PkiSpec, Role};
use std::sync::Arc;
use std::time::SystemTime;

const POLICY: &str = "id: quota\ndimensions: [{name: tenant}]\nscope: global\n\
    enforcement: exact\nalgorithm: fixed_window\nrate: {units: 10, per: 1h}\n";

fn gate(pki: &DevPki, holder: &str, allocator: &str) -> ExactGate {
    let policy = Policy::from_yaml(POLICY).unwrap();
    let engine = Engine::builder()
        .build(RuleSource::from_policies([policy]))
        .unwrap();
    let grantor: Arc<dyn Grantor> = Arc::new(RemoteGrantor::new(
        channels(pki, Role::Agent, holder),
        vec![allocator.to_string()],
        3,
    ));
    ExactGate::new(Arc::new(engine)).with_grantor(grantor, holder, 5_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_forwards_decisions_on_a_root_policy_to_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let spec = PkiSpec::local(&["global-1", "eu-1"], &["gw-eu", "gw-root"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    pki.write_to(&dir.path().join("certs"), true).unwrap();
    let root = start_root(dir.path(), &pki, POLICY).await;
    let region = start_region(dir.path(), &pki, &root, "eu", "quota").await;

    let (eu, at_root) = (
        gate(&pki, "gw-eu", &region.addr),
        gate(&pki, "gw-root", &root.addr),
    );
    let clock = SystemClock::new();
    let entries = [("tenant", "acme")];
    let dims = [Dimension::policy("quota", &entries)];
    let mut together = 0;
    for _ in 0..8 {
        for g in [&eu, &at_root] {
            let d = g.admit(&AdmitRequest::new(&dims), || clock.now()).await;
            together += u64::from(d.allowed);
        }
    }
    for g in [&eu, &at_root] {
        assert_eq!(
            g.counters()
                .unanswered
                .load(std::sync::atomic::Ordering::Relaxed),
            0,
            "every decision was answered"
        );
    }
    assert_eq!(together, 10, "one count at the root for both");
    region.shut_down().await;
    root.shut_down().await;
}
