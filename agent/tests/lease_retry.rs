//! A grantor that denies a first lease says when to come back; a window whose credit is
//! used up says "at the reset", often a few milliseconds later. The lease manager asks
//! again then, not after its own `retry_ms`, or every window would open with the key
//! refused for that long. A denial that names no time waits `retry_ms`.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig};
use leasehold_client::{BoxFuture, Grantor, GrantorError};
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::leasehold::v1 as pb;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nalgorithm: fixed_window\nrate: {units: 200, per: 1s}\nscope: global\n";
/// The manager's own wait after a denial; far longer than the test runs.
const RETRY_MS: u64 = 60_000;
/// How long the manager runs.
const RUN_MS: u64 = 1_000;

/// A grantor that denies every acquire, naming `retry_after_ms`, and counts them.
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

/// Runs a lease manager for `RUN_MS` against a grantor that denies naming
/// `retry_after_ms`, after one request for a key; returns the acquires it sent.
async fn acquires_sent(retry_after_ms: u64) -> u64 {
    let clock = SystemClock::new();
    let engine = Engine::builder()
        .start(clock.now())
        .build(RuleSource::from_policies(vec![
            Policy::from_yaml(POLICY).unwrap()
        ]))
        .unwrap();
    let grantor = Arc::new(Denying {
        retry_after_ms,
        acquires: AtomicU64::new(0),
    });
    let mut cfg = ManagerConfig::new("gw-1");
    cfg.tick_ms = 5;
    cfg.retry_ms = RETRY_MS;
    let queue = engine.take_acquire_queue().unwrap();
    let as_grantor: Arc<dyn Grantor> = grantor.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(LeaseManager::new(cfg, as_grantor, clock.clone(), queue).run(rx));

    let dims = [Dimension::policy("api", &[("tenant", "acme")])];
    let first = engine.admit(&AdmitRequest::new(&dims), clock.now());
    assert!(!first.allowed, "no credit before a lease");
    tokio::time::sleep(Duration::from_millis(RUN_MS)).await;
    stop.send(true).unwrap();
    let counters = task.await.unwrap();
    assert_eq!(counters.denials, grantor.acquires.load(Ordering::SeqCst));
    grantor.acquires.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_denial_naming_the_reset_is_asked_again_then() {
    // 20 ms named: dozens of acquires in the second; a handful is enough to show the
    // manager did not wait its own minute.
    let sent = acquires_sent(20).await;
    assert!(sent >= 3, "{sent} acquires in {RUN_MS} ms");
}

#[tokio::test]
async fn a_denial_naming_no_time_waits_retry_ms() {
    assert_eq!(acquires_sent(0).await, 1);
}
