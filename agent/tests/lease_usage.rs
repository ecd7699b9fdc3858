//! The holder's own counts reach the grantor: every refusal the engine gave a key is stated
//! once, cumulatively on the lease it happened under, or with the acquire of the next one
//! when the key held no lease, so the highest count each lease stated plus what acquires
//! carried sums to what the traffic saw.

use leasehold_agent::engine::Outcome;
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig};
use leasehold_client::{BoxFuture, Grantor, GrantorError, LocalGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// 20 units that do not come back during the test.
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1, per: 1h}\nburst: 20\nscope: global\nlease: {ttl: 2s, refresh_horizon: 200ms, reserve_fraction: 0}\n";

/// A grantor that remembers the highest refused and fail-open counts stated per lease, and
/// can be cut off (every call unreachable, nothing stated).
struct Recording {
    inner: Arc<LocalGrantor>,
    stated: Mutex<BTreeMap<u64, (u64, u64)>>,
    /// Counts acquires carried (made while no lease was held), by request id.
    acquired: Mutex<BTreeMap<u64, (u64, u64)>>,
    down: AtomicBool,
}

impl Recording {
    /// Refused and fail-open units stated over all leases and acquires.
    fn totals(&self) -> (u64, u64) {
        let stated = self.stated.lock().unwrap();
        let acquired = self.acquired.lock().unwrap();
        stated
            .values()
            .chain(acquired.values())
            .fold((0, 0), |(r, f), (dr, df)| (r + dr, f + df))
    }

    fn note(&self, lease_id: u64, refused: u64, fail_open: u64) {
        let mut m = self.stated.lock().unwrap();
        let e = m.entry(lease_id).or_default();
        *e = (e.0.max(refused), e.1.max(fail_open));
    }
}

/// Every call's answer while the grantor is cut off.
fn cut_off<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, GrantorError>> {
    Box::pin(async { Err(GrantorError::Unreachable("cut off".into())) })
}

impl Grantor for Recording {
    fn acquire(
        &self,
        req: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        if self.down.load(Ordering::SeqCst) {
            return cut_off();
        }
        let counts = (req.refused_units, req.fail_open_units);
        self.acquired.lock().unwrap().insert(req.request_id, counts);
        self.inner.acquire(req)
    }

    fn report(
        &self,
        req: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        if self.down.load(Ordering::SeqCst) {
            return cut_off();
        }
        self.note(req.lease_id, req.refused_units, req.fail_open_units);
        assert_eq!(req.shaped_units, 0, "the policy does not shape");
        self.inner.report(req)
    }

    fn release(
        &self,
        req: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        if self.down.load(Ordering::SeqCst) {
            return cut_off();
        }
        self.note(req.lease_id, req.refused_units, req.fail_open_units);
        self.inner.release(req)
    }
}

/// A root ledger with `policy`, the recording grantor in front of it, an engine and its
/// lease manager reporting every `report_every_ms`, running.
struct Running {
    local: Arc<LocalGrantor>,
    recording: Arc<Recording>,
    clock: SystemClock,
    engine: Arc<Engine>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<leasehold_agent::lease::ManagerCounters>,
}

fn start(policy: &str, report_every_ms: u64) -> Running {
    let policy = Policy::from_yaml(policy).unwrap();
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let local = Arc::new(LocalGrantor::new(
        Ledger::new(LedgerConfig::root("standalone")),
        signer,
        Arc::new(SystemClock::new()),
    ));
    assert_eq!(local.install(std::slice::from_ref(&policy)).unwrap(), 1);
    let recording = Arc::new(Recording {
        inner: Arc::clone(&local),
        stated: Mutex::new(BTreeMap::new()),
        acquired: Mutex::new(BTreeMap::new()),
        down: AtomicBool::new(false),
    });
    let clock = SystemClock::new();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(RuleSource::from_policies(vec![policy]))
            .unwrap(),
    );
    let mut cfg = ManagerConfig::new("gw-1");
    cfg.tick_ms = 5;
    cfg.report_every_ms = report_every_ms;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let grantor: Arc<dyn Grantor> = recording.clone();
    let manager = LeaseManager::new(
        cfg,
        grantor,
        clock.clone(),
        engine.take_acquire_queue().unwrap(),
    );
    let task = tokio::spawn(manager.run(rx));
    Running {
        local,
        recording,
        clock,
        engine,
        stop,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_reported_once_on_a_lease() {
    let Running {
        local,
        recording,
        clock,
        engine,
        stop,
        task,
    } = start(POLICY, 50);

    let (mut admitted, mut refused) = (0u64, 0u64);
    for _ in 0..60 {
        let entries = [("tenant", "acme")];
        let dims = [Dimension::policy("api", &entries)];
        if engine.admit(&AdmitRequest::new(&dims), clock.now()).allowed {
            admitted += 1;
        } else {
            refused += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        admitted > 0 && refused > 0,
        "{admitted} admitted, {refused} refused"
    );
    stop.send(true).unwrap();
    let counters = task.await.unwrap();
    assert!(counters.releases >= 1, "{counters:?}");

    let (reported, fail_open) = recording.totals();
    assert_eq!(reported, refused, "{:?}", recording.stated);
    assert_eq!(fail_open, 0);
    let used: u64 = local.with_ledger(|l| l.accounts().map(|(_, a)| a.stats.used).sum());
    assert_eq!(used, admitted);
}

/// Lease ttl of 300 ms, so a lease runs out while the grantor is cut off; fail-open.
const FAIL_OPEN: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1, per: 1h}\nburst: 1000\nscope: global\nfailure: {mode: fail_open}\nlease: {ttl: 300ms, refresh_horizon: 100ms, reserve_fraction: 0}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_admissions_are_reported_on_the_next_lease_that_gets_through() {
    let Running {
        recording,
        clock,
        engine,
        stop,
        task,
        ..
    } = start(FAIL_OPEN, 20);

    let mut fail_open = 0u64;
    let run = |ms: u64| {
        let engine = Arc::clone(&engine);
        let clock = clock.clone();
        async move {
            let (mut seen, started) = (0u64, std::time::Instant::now());
            while started.elapsed() < Duration::from_millis(ms) {
                let entries = [("tenant", "acme")];
                let dims = [Dimension::policy("api", &entries)];
                let d = engine.admit(&AdmitRequest::new(&dims), clock.now());
                seen += u64::from(d.results[0].outcome == Outcome::FailOpen);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        }
    };
    fail_open += run(200).await;
    assert_eq!(fail_open, 0, "the grantor answers");
    recording.down.store(true, Ordering::SeqCst);
    // Past the lease's end: the agent admits uncharged, counting each one.
    fail_open += run(1_500).await;
    assert!(fail_open > 0, "nothing was admitted fail-open");
    assert_eq!(
        recording.totals().1,
        0,
        "nothing could be sent while cut off"
    );
    recording.down.store(false, Ordering::SeqCst);
    fail_open += run(500).await;
    stop.send(true).unwrap();
    task.await.unwrap();

    assert_eq!(recording.totals().1, fail_open, "{:?}", recording.stated);
}
