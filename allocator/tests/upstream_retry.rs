//! When a delegated allocator's upstream denies credit it says when to come back; a window
//! whose credit is used up says "at the reset", often a few milliseconds later. The driver
//! asks again then, not after its own `retry_ms`, or every window would open with the
//! region's holders waiting that long for credit. A denial that names no time waits
//! `retry_ms` as before.

use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::service::ticker::run_ticker;
use leasehold_allocator::state::{AllocatorState, StateCommand};
use leasehold_allocator::upstream::{run_upstream, UpstreamConfig, UpstreamCounters};
use leasehold_client::{BoxFuture, Grantor, GrantorError};
use leasehold_common::ledger::{Acquire, Command, LedgerConfig};
use leasehold_common::time::SystemClock;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nalgorithm: fixed_window\nrate: {units: 200, per: 1s}\nscope: global\n";
/// The driver's own wait after a pause; far longer than the test runs.
const RETRY_MS: u64 = 60_000;
/// How long the driver runs.
const RUN_MS: u64 = 1_000;

/// An upstream that denies every acquire, naming `retry_after_ms`, and counts them.
struct Denying {
    retry_after_ms: u64,
    acquires: AtomicU64,
}

fn unused<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, GrantorError>> {
    Box::pin(async { Err(GrantorError::Unreachable("not used here".into())) })
}

impl Grantor for Denying {
    fn acquire(
        &self,
        _: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        let resp = pb::AcquireResponse {
            lease: None,
            retry_after_ms: self.retry_after_ms,
            ..Default::default()
        };
        Box::pin(async move { Ok(resp) })
    }
    fn report(
        &self,
        _: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        unused()
    }
    fn release(
        &self,
        _: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        unused()
    }
}

/// Runs a region's driver for `RUN_MS` against an upstream that denies naming
/// `retry_after_ms`, with one holder wanting credit; returns the acquires it sent.
async fn acquires_sent(retry_after_ms: u64) -> u64 {
    let replica = LocalReplica::new(
        AllocatorState::new(LedgerConfig::delegated("eu")),
        Arc::new(SystemClock::new()),
    );
    let mirror = StateCommand::MirrorPolicy {
        yaml: POLICY.into(),
        upstream_version: 1,
        actor: "test".into(),
    };
    replica.propose(mirror).await.unwrap();
    let ask = Command::Acquire(Acquire {
        holder_id: "gw-eu".into(),
        policy_id: "api".into(),
        key: "api:tenant=acme".into(),
        want_credit: 10,
        demand_milli_per_sec: 0,
        request_id: 1,
        priority: 0,
    });
    replica.propose(StateCommand::Ledger(ask)).await.unwrap();

    let upstream = Arc::new(Denying {
        retry_after_ms,
        acquires: AtomicU64::new(0),
    });
    let mut cfg = UpstreamConfig::new("eu");
    cfg.tick_ms = 10;
    cfg.retry_ms = RETRY_MS;
    let grantor: Arc<dyn Grantor> = upstream.clone();
    let counters = Arc::new(UpstreamCounters::default());
    let stop = || tokio::time::sleep(Duration::from_millis(RUN_MS));
    // The ledger's time moves with the ticks the leader proposes, as in the server.
    let ticker = run_ticker(replica.clone(), 10, stop());
    let driver = run_upstream(replica, grantor, None, cfg, Arc::clone(&counters), stop());
    tokio::join!(ticker, driver);
    assert_eq!(
        counters.denied.load(Ordering::SeqCst),
        upstream.acquires.load(Ordering::SeqCst),
        "every acquire was denied"
    );
    upstream.acquires.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_denial_naming_the_reset_is_asked_again_then() {
    // 20 ms named, 10 ms rounds: about 30 acquires in the second; a handful is enough to
    // show the driver did not wait its own minute.
    let sent = acquires_sent(20).await;
    assert!(sent >= 3, "{sent} acquires in {RUN_MS} ms");
}

#[tokio::test]
async fn a_denial_naming_no_time_waits_retry_ms() {
    assert_eq!(acquires_sent(0).await, 1);
}
