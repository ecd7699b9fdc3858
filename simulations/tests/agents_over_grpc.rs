//! Agents leasing over gRPC with mutual TLS: two agents (each with its own certificate)
//! spend one tenant's budget while demand moves between them; the total admitted stays
//! within B + r·T, and shutdown returns every unspent unit.

// The allocator's in-process service fixture, shared rather than copied.
#[path = "../../allocator/tests/service_support/mod.rs"]
mod service_support;

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig};
use leasehold_allocator::replica::Replica;
use leasehold_client::RemoteGrantor;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, Role};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1000, per: 1s}\nburst: 300\nscope: global\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_share_a_budget_over_mtls_and_return_unspent_credit() {
    let c = service_support::start().await;
    c.admin()
        .apply_policy(pb::ApplyPolicyRequest {
            yaml: POLICY.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let policy = Policy::from_yaml(POLICY).unwrap();
    let mut agents = Vec::new();
    for name in ["gw-1", "gw-2"] {
        let clock = SystemClock::new();
        let engine = Arc::new(
            Engine::builder()
                .start(clock.now())
                .build(RuleSource::from_policies(vec![policy.clone()]))
                .unwrap(),
        );
        let transport = ClientTransport::MutualTls {
            pem: c.pki.tls_pem(Role::Agent, name).unwrap(),
            server_name: Some("localhost".into()),
        };
        let grantor = Arc::new(RemoteGrantor::new(
            ChannelFactory::new(ChannelSettings::default(), transport).unwrap(),
            vec![c.addr.to_string()],
            3,
        ));
        let mut cfg = ManagerConfig::new(name);
        cfg.tick_ms = 5;
        cfg.report_every_ms = 100;
        let (stop, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(
            LeaseManager::new(
                cfg,
                grantor,
                clock.clone(),
                engine.take_acquire_queue().unwrap(),
            )
            .run(rx),
        );
        agents.push((engine, clock, stop, task));
    }
    let started = Instant::now();
    let mut admitted = [0u64; 2];
    while started.elapsed() < Duration::from_millis(800) {
        let busy = usize::from(started.elapsed() >= Duration::from_millis(400));
        let (engine, clock, _, _) = &agents[busy];
        for _ in 0..40 {
            let entries = [("tenant", "acme")];
            let dims = [Dimension::policy("api", &entries)];
            if engine.admit(&AdmitRequest::new(&dims), clock.now()).allowed {
                admitted[busy] += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    assert!(
        admitted[0] > 100 && admitted[1] > 100,
        "credit followed demand: {admitted:?}"
    );
    let total = admitted[0] + admitted[1];
    assert!(
        total <= 300 + elapsed_ms + 50,
        "{total} admitted in {elapsed_ms} ms exceeds B + r*T"
    );
    for (_, _, stop, task) in agents {
        stop.send(true).unwrap();
        let counters = task.await.unwrap();
        assert!(counters.releases >= 1, "{counters:?}");
    }
    let (conserved, outstanding, used) = c
        .replica
        .read(|s| {
            let a = s.ledger().account("api:tenant=acme").expect("key").clone();
            (s.ledger().conserved(), a.outstanding, a.stats.used)
        })
        .await
        .unwrap();
    assert!(conserved);
    assert_eq!(outstanding, 0, "every lease released on shutdown");
    assert_eq!(
        used, total,
        "the allocator counts exactly what the agents admitted"
    );
}
