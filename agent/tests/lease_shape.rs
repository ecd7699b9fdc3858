//! Shaping at a leased key with credit granted through the lease manager: two agents share
//! one budget from an in-process ledger, both shaping. Each agent's departures stay within
//! `burst + rate·T`, no delay exceeds `max_delay`, and the ledger's final usage is exactly
//! what the agents admitted, within the fleet's bound. (Whether any request is delayed
//! here depends on how the grants fall; the delays themselves are checked against granted
//! credit in engine_shape_leased.rs and engine_shape_props.rs.)

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig};
use leasehold_client::{Grantor, LocalGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::policy::Policy;
use leasehold_common::rate::Rate;
use leasehold_common::time::{Clock, Nanos, SystemClock};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;
const RATE_PER_S: u64 = 200;
const BURST: u64 = 20;
const MAX_DELAY_MS: u64 = 50;

fn policy() -> Policy {
    Policy::from_yaml(&format!(
        "id: api\ndimensions: [{{name: tenant}}]\nkey: [tenant]\n\
         rate: {{units: {RATE_PER_S}, per: 1s}}\nburst: {BURST}\nscope: global\n\
         shape: {{max_delay: {MAX_DELAY_MS}ms}}\n\
         lease: {{ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}}\n"
    ))
    .unwrap()
}

struct Agent {
    engine: Arc<Engine>,
    clock: SystemClock,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<leasehold_agent::lease::ManagerCounters>,
    departures: Vec<Nanos>,
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
        departures: Vec::new(),
    }
}

/// Offers one request that accepts a delay; records its departure if admitted.
fn offer(a: &mut Agent) {
    let entries = [("tenant", "acme")];
    let dims = [Dimension::policy("api", &entries)];
    let req = AdmitRequest {
        accept_delay: true,
        ..AdmitRequest::new(&dims)
    };
    let now = a.clock.now();
    let d = a.engine.admit(&req, now);
    if d.allowed {
        assert!(d.delay_ns <= MAX_DELAY_MS * MS, "delay {} ns", d.delay_ns);
        a.departures.push(now.saturating_add_ns(d.delay_ns));
    }
}

/// Any `n` departures within `T` of each other number at most `burst + rate·T`.
fn assert_paced(departures: &mut [Nanos], rate: Rate) {
    departures.sort();
    for i in 0..departures.len() {
        for j in i..departures.len() {
            let t = departures[j].saturating_since(departures[i]);
            let n = (j - i + 1) as u64;
            assert!(
                n <= BURST + rate.units_in(t),
                "{n} depart within {t} ns, bound {}",
                BURST + rate.units_in(t)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_credit_departs_paced_at_each_agent_and_settles_exactly() {
    let policy = policy();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let local = Arc::new(LocalGrantor::new(
        Ledger::new(LedgerConfig::root("standalone")),
        signer,
        Arc::new(SystemClock::new()),
    ));
    assert_eq!(local.install(std::slice::from_ref(&policy)).unwrap(), 1);
    let grantor: Arc<dyn Grantor> = local.clone();
    let mut agents = [
        agent("gw-1", Arc::clone(&grantor), &policy),
        agent("gw-2", grantor, &policy),
    ];
    let started = Instant::now();
    // Both agents offer far more than the budget, in bursts of several at one instant.
    while started.elapsed() < Duration::from_millis(500) {
        for a in agents.iter_mut() {
            for _ in 0..8 {
                offer(a);
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    let rate = Rate::per_second(RATE_PER_S).unwrap();
    let mut admitted = 0;
    for a in agents.iter_mut() {
        assert!(!a.departures.is_empty(), "each agent was granted credit");
        assert_paced(&mut a.departures, rate);
        admitted += a.departures.len() as u64;
    }
    for a in &agents {
        a.stop.send(true).unwrap();
    }
    for a in agents {
        a.task.await.unwrap();
    }
    local.with_ledger(|l| {
        assert!(l.conserved());
        let acct = l.account("api:tenant=acme").expect("key exists");
        assert_eq!(acct.outstanding, 0, "every lease released");
        assert_eq!(acct.stats.used, admitted, "final usage is exact");
        // The budget's bound over the whole run, with slack for the ledger's own clock.
        let bound = BURST + rate.units_in(elapsed.as_nanos() as u64 + 100 * MS);
        assert!(admitted <= bound, "{admitted} admitted, bound {bound}");
    });
}
