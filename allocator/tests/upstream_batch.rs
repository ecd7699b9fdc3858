//! A region's calls to its upstream grow with rounds, not keys: every key due in a round
//! (acquires, reports that renew, releases) leaves in one `LeaseBatch`, and each call in it
//! is answered as its own call would be. An upstream without `LeaseBatch` (an older
//! version) still serves the region, one call per key.

use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::service::ticker::run_ticker;
use leasehold_allocator::service::ReplicaGrantor;
use leasehold_allocator::state::{AllocatorState, StateCommand};
use leasehold_allocator::upstream::{run_upstream, UpstreamConfig, UpstreamCounters};
use leasehold_client::{BoxFuture, Grantor, GrantorError};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Acquire, Command, LedgerConfig};
use leasehold_common::time::SystemClock;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100000, per: 1s}\nburst: 100000\nscope: global\nlease: {ttl: 5s, refresh_horizon: 1s, reserve_fraction: 0}\n";
/// Keys the region's holders use, each its own upstream lease.
const KEYS: usize = 300;
/// How long the driver runs, and how often it reports on each key.
const RUN_MS: u64 = 1_500;
const REPORT_EVERY_MS: u64 = 200;
const TICK_MS: u64 = 20;

type Root = LocalReplica<AllocatorState>;

/// The root's lease service, counting the calls that reach it one by one and in batches.
struct Counting {
    inner: ReplicaGrantor<Root>,
    replica: Root,
    single: AtomicU64,
    batches: AtomicU64,
    items: AtomicU64,
    largest: AtomicU64,
    /// Answers `LeaseBatch` as a version without it would.
    no_batch: AtomicBool,
}

impl Grantor for Counting {
    fn acquire(
        &self,
        r: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        self.single.fetch_add(1, SeqCst);
        self.inner.acquire(r)
    }
    fn report(
        &self,
        r: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        self.single.fetch_add(1, SeqCst);
        self.inner.report(r)
    }
    fn release(
        &self,
        r: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        self.single.fetch_add(1, SeqCst);
        self.inner.release(r)
    }
    fn lease_batch(
        &self,
        r: pb::LeaseBatchRequest,
    ) -> BoxFuture<'_, Result<pb::LeaseBatchResponse, GrantorError>> {
        if self.no_batch.load(SeqCst) {
            return Box::pin(async {
                Err(GrantorError::Refused {
                    code: tonic::Code::Unimplemented,
                    message: "unknown method LeaseBatch".into(),
                })
            });
        }
        self.batches.fetch_add(1, SeqCst);
        let n = r.items.len() as u64;
        self.items.fetch_add(n, SeqCst);
        self.largest.fetch_max(n, SeqCst);
        self.inner.lease_batch(r)
    }
}

struct Run {
    root: Arc<Counting>,
    counters: Arc<UpstreamCounters>,
    region: LocalReplica<AllocatorState>,
}

/// A region whose holders use `KEYS` keys, leasing from a counting root for `RUN_MS`.
async fn run(no_batch: bool) -> Run {
    let clock = Arc::new(SystemClock::new());
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let replica = LocalReplica::new(
        AllocatorState::new(LedgerConfig::root("global")),
        clock.clone(),
    );
    let apply = StateCommand::ApplyPolicy {
        yaml: POLICY.into(),
        shadow: false,
        effective_at_ns: 0,
        actor: "test".into(),
    };
    replica.propose(apply).await.unwrap();
    let root = Arc::new(Counting {
        inner: ReplicaGrantor::new(replica.clone(), Some(Arc::new(signer))),
        replica,
        single: AtomicU64::new(0),
        batches: AtomicU64::new(0),
        items: AtomicU64::new(0),
        largest: AtomicU64::new(0),
        no_batch: AtomicBool::new(no_batch),
    });
    let region = LocalReplica::new(AllocatorState::new(LedgerConfig::delegated("eu")), clock);
    let mirror = StateCommand::MirrorPolicy {
        yaml: POLICY.into(),
        upstream_version: 1,
        actor: "test".into(),
    };
    region.propose(mirror).await.unwrap();
    for i in 0..KEYS {
        let ask = Command::Acquire(Acquire {
            holder_id: "gw-eu".into(),
            policy_id: "api".into(),
            key: format!("api:tenant=t{i:04}"),
            want_credit: 10,
            demand_milli_per_sec: 5_000,
            request_id: 1 + i as u64,
            priority: 0,
        });
        region.propose(StateCommand::Ledger(ask)).await.unwrap();
    }
    let mut cfg = UpstreamConfig::new("eu");
    cfg.tick_ms = TICK_MS;
    cfg.plan.report_every_ms = REPORT_EVERY_MS;
    let grantor: Arc<dyn Grantor> = root.clone();
    let counters = Arc::new(UpstreamCounters::default());
    let stop = || tokio::time::sleep(Duration::from_millis(RUN_MS));
    let ticker = run_ticker(region.clone(), TICK_MS, stop());
    let driver = run_upstream(region.clone(), grantor, None, cfg, counters.clone(), stop());
    tokio::join!(ticker, driver);
    Run {
        root,
        counters,
        region,
    }
}

/// Keys of the region holding an upstream lease.
async fn keys_leased(region: &LocalReplica<AllocatorState>) -> usize {
    region
        .read(|s| {
            (0..KEYS)
                .filter(|i| {
                    s.ledger()
                        .upstream_position(&format!("api:tenant=t{i:04}"))
                        .is_some()
                })
                .count()
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn every_key_of_a_round_leaves_in_one_batch() {
    let r = run(false).await;
    let (single, batches) = (r.root.single.load(SeqCst), r.root.batches.load(SeqCst));
    let reports = r.counters.reports.load(SeqCst);
    assert_eq!(single, 0, "no call left on its own");
    assert_eq!(r.counters.acquired.load(SeqCst), KEYS as u64);
    assert_eq!(
        r.root.largest.load(SeqCst),
        KEYS as u64,
        "the first round acquired every key in one call"
    );
    assert_eq!(keys_leased(&r.region).await, KEYS);
    // Every key is reported on about every REPORT_EVERY_MS: several times in the run,
    // each time all keys together.
    assert!(reports >= 3 * KEYS as u64, "{reports} reports");
    let calls_max = RUN_MS / TICK_MS;
    assert!(
        batches <= calls_max,
        "{batches} batches in {RUN_MS} ms of {TICK_MS} ms rounds"
    );
    assert_eq!(r.counters.batch_calls.load(SeqCst), batches);
    let per_batch = r.root.items.load(SeqCst) / batches;
    assert!(per_batch >= 100, "{per_batch} calls per batch on average");
    let conserved = r.root.replica.read(|s| s.ledger().conserved()).await;
    assert!(conserved.unwrap(), "the root's books balance");
}

#[tokio::test]
async fn an_upstream_without_batches_is_served_call_by_call() {
    let r = run(true).await;
    assert_eq!(r.root.batches.load(SeqCst), 0);
    assert_eq!(r.counters.acquired.load(SeqCst), KEYS as u64);
    assert_eq!(keys_leased(&r.region).await, KEYS);
    assert!(
        r.root.single.load(SeqCst) >= 2 * KEYS as u64,
        "acquired and reported on one by one"
    );
    assert_eq!(
        r.counters.batch_calls.load(SeqCst),
        1,
        "one batch tried, then calls one by one"
    );
}
