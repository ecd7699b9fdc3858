//! An agent following the allocator's watch stream over gRPC: with no policy files it gets
//! its rules from the allocator, a revoked lease stops being spent at once (not at the next
//! report), and an emergency switch reaches the engine.

// The allocator's in-process service fixture, shared rather than copied.
#[path = "../../allocator/tests/service_support/mod.rs"]
mod service_support;

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig};
use leasehold_client::RemoteGrantor;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, Role};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1000, per: 1s}\nburst: 500\nscope: global\nlease: {ttl: 5s, refresh_horizon: 200ms, reserve_fraction: 0}\n";

fn admit(engine: &Engine, clock: &SystemClock) -> bool {
    let entries = [("tenant", "acme")];
    let dims = [Dimension::policy("api", &entries)];
    engine.admit(&AdmitRequest::new(&dims), clock.now()).allowed
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_revocations_and_switches_arrive_over_the_watch_stream() {
    let c = service_support::start().await;
    c.admin()
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: POLICY.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let clock = SystemClock::new();
    // No policies of its own: they come from the allocator.
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(RuleSource::default())
            .unwrap(),
    );
    let grantor = Arc::new(RemoteGrantor::new(
        ChannelFactory::new(
            ChannelSettings::default(),
            ClientTransport::MutualTls {
                pem: c.pki.tls_pem(Role::Agent, "gw-1").unwrap(),
                server_name: Some("localhost".into()),
            },
        )
        .unwrap(),
        vec![c.addr.to_string()],
        3,
    ));
    let mut cfg = ManagerConfig::new("gw-1");
    cfg.tick_ms = 5;
    // Reports are rare, so only the watch stream can stop a revoked lease in time.
    cfg.report_every_ms = 60_000;
    cfg.initial_want = 400;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(
        LeaseManager::new(
            cfg,
            grantor,
            clock.clone(),
            engine.take_acquire_queue().unwrap(),
        )
        .with_engine(Arc::clone(&engine))
        .run(rx),
    );

    eventually("the policy arrives", || {
        engine.policy_ids().contains(&"api".to_string())
    })
    .await;
    eventually("a lease is granted", || admit(&engine, &clock)).await;
    let leases = c
        .admin()
        .list_leases(pb::ListLeasesRequest {
            holder_id: "gw-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .leases;
    assert_eq!(leases.len(), 1, "{leases:?}");
    let lease = leases[0].lease.as_ref().unwrap();
    assert!(lease.credit > 10, "credit left to spend: {}", lease.credit);

    c.admin()
        .revoke_lease(pb::RevokeLeaseRequest {
            lease_id: lease.lease_id,
            reason: "test".into(),
        })
        .await
        .unwrap();
    let revoked_at = Instant::now();
    // The lease still had credit; only the revocation can make the slot refuse.
    eventually("the revoked lease stops being spent", || {
        !admit(&engine, &clock)
    })
    .await;
    assert!(
        revoked_at.elapsed() < Duration::from_millis(500),
        "revocation took {:?}",
        revoked_at.elapsed()
    );

    c.admin()
        .set_emergency(pb::SetEmergencyRequest {
            emergency: Some(pb::EmergencySwitch {
                policy_id: "api".into(),
                mode: pb::EmergencyMode::FailOpen as i32,
                ..Default::default()
            }),
            reason: "test".into(),
        })
        .await
        .unwrap();
    eventually("fail-open admissions are counted", || {
        admit(&engine, &clock);
        engine
            .stats()
            .policies
            .iter()
            .any(|p| p.policy_id == "api" && p.counters.fail_open > 0)
    })
    .await;

    stop.send(true).unwrap();
    let counters = task.await.unwrap();
    assert_eq!(counters.revocations, 1, "{counters:?}");
    assert!(counters.watch_connects >= 1);
    assert!(counters.policies_installed >= 1);
}
