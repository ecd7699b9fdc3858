//! The state file: spending never passes a durable mark, and an agent restarted after a
//! crash settles its previous run's leases at their marks and resumes request ids.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, LeaseStore, ManagerConfig, ManagerCounters, SledStore};
use leasehold_client::{Grantor, LocalGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 2000, per: 1s}\nburst: 400\nscope: global\nlease: {ttl: 10s, refresh_horizon: 200ms, reserve_fraction: 0}\n";
const KEY: &str = "api:tenant=acme";

struct Run {
    engine: Arc<Engine>,
    clock: SystemClock,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<ManagerCounters>,
}

fn start(grantor: Arc<dyn Grantor>, policy: &Policy, store: Option<Arc<dyn LeaseStore>>) -> Run {
    let clock = SystemClock::new();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(RuleSource::from_policies(vec![policy.clone()]))
            .unwrap(),
    );
    let mut cfg = ManagerConfig::new("gw-1");
    cfg.tick_ms = 5;
    cfg.report_every_ms = 100;
    cfg.mark_chunk_min = 20;
    let mut manager = LeaseManager::new(
        cfg,
        grantor,
        clock.clone(),
        engine.take_acquire_queue().unwrap(),
    );
    if let Some(store) = store {
        manager = manager.with_store(store);
    }
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(manager.run(rx));
    Run {
        engine,
        clock,
        stop,
        task,
    }
}

/// Admits as fast as it can for `ms`; returns how many were admitted.
async fn drive(run: &Run, ms: u64) -> u64 {
    let started = Instant::now();
    let mut admitted = 0;
    while started.elapsed() < Duration::from_millis(ms) {
        for _ in 0..20 {
            let entries = [("tenant", "acme")];
            let dims = [Dimension::policy("api", &entries)];
            if run
                .engine
                .admit(&AdmitRequest::new(&dims), run.clock.now())
                .allowed
            {
                admitted += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_run_is_settled_at_its_marks_and_never_spent_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LeaseStore> =
        Arc::new(SledStore::open(&dir.path().join("state"), 1_000).unwrap());
    let policy = Policy::from_yaml(POLICY).unwrap();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let local = Arc::new(LocalGrantor::new(
        Ledger::new(LedgerConfig::root("standalone")),
        signer,
        Arc::new(SystemClock::new()),
    ));
    local.install(std::slice::from_ref(&policy)).unwrap();
    let started = Instant::now();

    let first = start(local.clone(), &policy, Some(Arc::clone(&store)));
    let admitted_first = drive(&first, 300).await;
    // A crash: the task stops where it is, nothing is released.
    first.task.abort();
    let _ = first.task.await;
    let marks = store.load().unwrap().marks;
    assert_eq!(marks.len(), 1, "the crashed run's lease is recorded");
    let (&old_lease, &mark) = marks.iter().next().unwrap();
    assert!(admitted_first > 0);
    assert!(
        admitted_first <= mark,
        "spent {admitted_first} past the durable mark {mark}"
    );
    let old_credit = local.with_ledger(|l| l.lease(old_lease).expect("still live").lease.credit);
    // The mark runs a chunk ahead of spending (`marks.rs` tests the chunks); the chunk
    // grows with the demand measured, and this run offers far more than the policy's rate,
    // so the mark may well have reached the whole credit when the crash comes.
    assert!(
        mark <= old_credit,
        "the mark never runs past the lease's credit ({mark} vs {old_credit})"
    );

    let second = start(local.clone(), &policy, Some(Arc::clone(&store)));
    let admitted_second = drive(&second, 300).await;
    assert!(
        admitted_second > 0,
        "a restarted agent leases again: its request ids are above the old ones"
    );
    local.with_ledger(|l| {
        assert!(l.lease(old_lease).is_none(), "the old lease was released");
        assert!(l.tombstone(old_lease).is_some());
    });
    second.stop.send(true).unwrap();
    let counters = second.task.await.unwrap();
    assert_eq!(counters.recovered, 1, "{counters:?}");
    assert_eq!(counters.recovered_reclaimed, old_credit - mark);
    local.with_ledger(|l| {
        assert!(l.conserved());
        let acct = l.account(KEY).expect("key exists");
        assert_eq!(acct.outstanding, 0, "every lease settled");
        assert_eq!(
            acct.stats.used,
            mark + admitted_second,
            "the old lease counts as spent up to its mark, the new one exactly"
        );
        assert!(acct.stats.used >= admitted_first + admitted_second);
        let bound = 400 + 2 * (started.elapsed().as_millis() as u64 + 100);
        assert!(acct.stats.used <= bound, "within B + r*T");
    });
    assert!(
        store.load().unwrap().marks.is_empty(),
        "settled leases are forgotten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_state_file_a_restart_starts_with_nothing() {
    let policy = Policy::from_yaml(POLICY).unwrap();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let local = Arc::new(LocalGrantor::new(
        Ledger::new(LedgerConfig::root("standalone")),
        signer,
        Arc::new(SystemClock::new()),
    ));
    local.install(std::slice::from_ref(&policy)).unwrap();
    let first = start(local.clone(), &policy, None);
    assert!(drive(&first, 200).await > 0);
    first.task.abort();
    let _ = first.task.await;
    let old: Vec<u64> = local.with_ledger(|l| l.leases().map(|r| r.lease.lease_id).collect());
    assert_eq!(old.len(), 1);
    let second = start(local.clone(), &policy, None);
    drive(&second, 100).await;
    second.stop.send(true).unwrap();
    let counters = second.task.await.unwrap();
    assert_eq!(counters.recovered, 0);
    local.with_ledger(|l| {
        assert!(
            l.lease(old[0]).is_some(),
            "the old lease is left to expire and be written off"
        )
    });
}
