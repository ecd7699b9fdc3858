//! Agents connected to a grantor through the lease manager: credit arrives on first use,
//! renewals keep demand served, and shutdown releases every lease with its exact final
//! usage, so the grantor's ledger counts exactly what the agents admitted.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig};
use leasehold_client::{Grantor, LocalGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 2000, per: 1s}\nburst: 400\nscope: global\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";

struct Agent {
    engine: Arc<Engine>,
    clock: SystemClock,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<leasehold_agent::lease::ManagerCounters>,
}

fn agent(name: &str, grantor: Arc<dyn Grantor>, policy: &Policy) -> Agent {
    let clock = SystemClock::new();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(RuleSource::from_policies(vec![policy.clone()]))
            .unwrap(),
    );
    let queue = engine.take_acquire_queue().unwrap();
    let mut cfg = ManagerConfig::new(name);
    cfg.tick_ms = 5;
    cfg.report_every_ms = 100;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let manager = LeaseManager::new(cfg, grantor, clock.clone(), queue);
    let task = tokio::spawn(manager.run(rx));
    Agent {
        engine,
        clock,
        stop,
        task,
    }
}

/// An in-process root ledger granting `policy`, signing with `signer`.
fn local_grantor(policy: &Policy, signer: LeaseSigner) -> Arc<LocalGrantor> {
    let local = Arc::new(LocalGrantor::new(
        Ledger::new(LedgerConfig::root("standalone")),
        signer,
        Arc::new(SystemClock::new()),
    ));
    assert_eq!(local.install(std::slice::from_ref(policy)).unwrap(), 1);
    local
}

fn admit(a: &Agent, tenant: &str) -> bool {
    let entries = [("tenant", tenant)];
    let dims = [Dimension::policy("api", &entries)];
    a.engine
        .admit(&AdmitRequest::new(&dims), a.clock.now())
        .allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_credit_flows_to_demand_and_shutdown_settles_exactly() {
    let policy = Policy::from_yaml(POLICY).unwrap();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let local = local_grantor(&policy, signer);
    let grantor: Arc<dyn Grantor> = local.clone();
    let (a, b) = (
        agent("gw-1", Arc::clone(&grantor), &policy),
        agent("gw-2", grantor, &policy),
    );
    let mut admitted = [0u64; 2];
    let started = Instant::now();
    // First 300 ms: demand at agent a only; then at agent b only.
    while started.elapsed() < Duration::from_millis(600) {
        let busy = usize::from(started.elapsed() >= Duration::from_millis(300));
        for _ in 0..20 {
            if admit([&a, &b][busy], "acme") {
                admitted[busy] += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        admitted[0] > 100 && admitted[1] > 100,
        "both agents were served in turn: {admitted:?}"
    );
    for x in [&a, &b] {
        x.stop.send(true).unwrap();
    }
    let counters = (a.task.await.unwrap(), b.task.await.unwrap());
    assert!(
        counters.0.releases >= 1 && counters.1.releases >= 1,
        "{counters:?}"
    );
    // An in-process grantor pushes nothing, so there is no stream to watch (or to find
    // silent and reopen).
    assert_eq!(counters.0.watch_connects + counters.1.watch_connects, 0);
    local.with_ledger(|l| {
        assert!(l.conserved());
        let acct = l.account("api:tenant=acme").expect("key exists");
        assert_eq!(acct.outstanding, 0, "every lease released");
        assert_eq!(
            acct.stats.used,
            admitted[0] + admitted[1],
            "final usage is exact"
        );
        let bound = 400 + 2 * (started.elapsed().as_millis() as u64 + 100);
        assert!(acct.stats.used <= bound, "within B + r*T");
    });
}

/// A key the engine drops (idle past its key lifetime) gives its lease back at once, long
/// before the manager's own idle release, and with its exact usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_engine_drops_releases_its_lease() {
    let policy = Policy::from_yaml(POLICY).unwrap();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let local = local_grantor(&policy, signer);
    let clock = SystemClock::new();
    let limits = leasehold_agent::engine::EngineLimits {
        key_idle_ns: 50_000_000,
        ..Default::default()
    };
    let engine = Arc::new(
        Engine::builder()
            .limits(limits)
            .start(clock.now())
            .build(RuleSource::from_policies(vec![policy.clone()]))
            .unwrap(),
    );
    let mut cfg = ManagerConfig::new("gw-1");
    cfg.tick_ms = 5;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let manager = LeaseManager::new(
        cfg,
        local.clone(),
        clock.clone(),
        engine.take_acquire_queue().unwrap(),
    );
    let task = tokio::spawn(manager.run(rx));
    let a = Agent {
        engine: Arc::clone(&engine),
        clock: clock.clone(),
        stop,
        task,
    };
    let mut admitted = 0u64;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(200) {
        admitted += u64::from(admit(&a, "acme"));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(admitted > 0);
    let live = |l: &Ledger| l.leases().count();
    assert_eq!(local.with_ledger(live), 1, "one lease held");
    // Idle past the key lifetime: the engine drops the key, and the manager its lease.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(engine.sweep(clock.now()) >= 1, "the engine dropped the key");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(local.with_ledger(live), 0, "the lease went back");
    let used: u64 = local.with_ledger(|l| l.accounts().map(|(_, a)| a.stats.used).sum());
    assert_eq!(used, admitted, "released with its exact usage");
    a.stop.send(true).unwrap();
    let counters = a.task.await.unwrap();
    assert_eq!(counters.evicted_released, 1);
}

/// With the grantor's keys configured, only leases it really signed are spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_signed_by_an_untrusted_key_are_never_spent() {
    let policy = Policy::from_yaml(POLICY).unwrap();
    let rng = ring::rand::SystemRandom::new();
    let signer = LeaseSigner::generate(&rng).unwrap();
    let trusted = signer.public_key().to_vec();
    let stranger = LeaseSigner::generate(&rng).unwrap().public_key().to_vec();
    let local = local_grantor(&policy, signer);
    for (key, should_admit) in [(stranger, false), (trusted, true)] {
        let clock = SystemClock::new();
        let engine = Arc::new(
            Engine::builder()
                .start(clock.now())
                .build(RuleSource::from_policies(vec![policy.clone()]))
                .unwrap(),
        );
        let mut verifier = leasehold_common::lease::LeaseVerifier::new();
        verifier.trust(&key).unwrap();
        let mut cfg = ManagerConfig::new(if should_admit { "gw-ok" } else { "gw-no" });
        cfg.tick_ms = 5;
        cfg.retry_ms = 20;
        cfg.verifier = Some(verifier);
        let queue = engine.take_acquire_queue().unwrap();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let task =
            tokio::spawn(LeaseManager::new(cfg, local.clone(), clock.clone(), queue).run(rx));
        let a = Agent {
            engine,
            clock,
            stop,
            task,
        };
        let mut admitted = 0u64;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(200) {
            admitted += u64::from(admit(&a, "acme"));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        a.stop.send(true).unwrap();
        let counters = a.task.await.unwrap();
        if should_admit {
            assert!(admitted > 0 && counters.bad_signatures == 0, "{counters:?}");
        } else {
            assert_eq!(admitted, 0, "nothing spent on an unverified lease");
            assert!(counters.bad_signatures > 0, "{counters:?}");
        }
    }
}

/// A lease no longer than the holder's refresh horizon (the default horizon is 2 s, as long
/// as this policy's leases) is renewed when half its life has gone, and otherwise only on
/// the report interval: not on every tick of the manager, which would make each agent call
/// its grantor hundreds of times a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_as_short_as_the_refresh_horizon_is_not_renewed_on_every_tick() {
    let policy = Policy::from_yaml(POLICY).unwrap();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let grantor: Arc<dyn Grantor> = local_grantor(&policy, signer);
    let a = agent("gw-1", grantor, &policy);
    let started = Instant::now();
    let mut admitted = 0u64;
    // About 20 requests a second for 1.5 s: far below the rate, so credit never runs low.
    while started.elapsed() < Duration::from_millis(1_500) {
        admitted += u64::from(admit(&a, "acme"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.stop.send(true).unwrap();
    let counters = a.task.await.unwrap();
    assert!(admitted >= 20, "admitted {admitted}");
    // Ticks every 5 ms (300 in 1.5 s), reports every 100 ms (15 in 1.5 s).
    assert!(
        counters.reports <= 45,
        "{} reports in 1.5 s: {counters:?}",
        counters.reports
    );
    assert!(counters.reports >= 5, "{counters:?}");
}

/// An agent restarted after its wall clock stepped back starts its request ids below those
/// its previous run used; the grantor refuses them as stale, says how far it has seen, and
/// the agent continues above at once instead of waiting for its clock to catch up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_behind_the_previous_runs_request_ids_is_served_at_once() {
    use leasehold_proto::leasehold::v1 as pb;
    let policy = Policy::from_yaml(POLICY).unwrap();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let grantor: Arc<dyn Grantor> = local_grantor(&policy, signer);
    // The previous run, its wall clock a day ahead, used ids far above today's.
    let ahead = SystemTimeIds::now() + 86_400 * 1_000_000_000;
    let previous = pb::AcquireRequest {
        holder_id: "gw-1".into(),
        policy_id: "api".into(),
        key: "api:tenant=acme".into(),
        want_credit: 1,
        request_id: ahead,
        ..Default::default()
    };
    grantor.acquire(previous).await.unwrap();
    let a = agent("gw-1", grantor, &policy);
    let started = Instant::now();
    while !admit(&a, "acme") {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the restarted agent was not served"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.stop.send(true).unwrap();
    let counters = a.task.await.unwrap();
    assert!(
        counters.acquires >= 2,
        "the first acquire was refused as stale: {counters:?}"
    );
}

/// Request ids as an agent without a state file starts them: the wall clock in ns.
struct SystemTimeIds;

impl SystemTimeIds {
    fn now() -> u64 {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        u64::try_from(since_epoch.as_nanos()).unwrap()
    }
}
