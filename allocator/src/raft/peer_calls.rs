//! How Raft RPCs to one peer are sent: each call finishes in its own task even when openraft
//! stops waiting for it, at most a bounded number are in flight, and a peer's failures are
//! logged once when they start and once when it answers again.
//!
//! Why a call outlives openraft's interest: openraft drops an append-entries future at its
//! deadline (the heartbeat interval). Dropping a tonic call mid-flight resets its HTTP/2
//! stream; a peer slow to accept streams (busy, or just continued after SIGSTOP) then finds
//! many remotely reset streams in its accept queue, and h2 answers more than its limit of
//! them with `GOAWAY(ENHANCE_YOUR_CALM, "too_many_resets")`, failing every call on the
//! connection. A detached call instead ends with the peer's answer, or, from a peer that
//! no longer answers at all, after a grace period (then with a reset, at most
//! [`PEER_CALLS_IN_FLIGHT_MAX`] of them).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_proto::leasehold::v1::RaftBytes;
use std::future::Future;
use tokio::sync::Semaphore;

/// What a Raft RPC comes back with.
pub type Reply = Result<tonic::Response<RaftBytes>, tonic::Status>;

/// Most detached calls in flight to one peer; beyond it a call fails at once (openraft
/// retries on its next round). Bounds what an unresponsive peer costs.
pub const PEER_CALLS_IN_FLIGHT_MAX: usize = 16;
/// How long a detached call may outlive its deadline before it is dropped (and its stream
/// reset), for a peer whose server no longer answers at all, in milliseconds.
pub const DETACHED_CALL_GRACE_MS: u64 = 2_000;

/// What one peer's calls share across openraft's replication streams and votes.
pub struct PeerCalls {
    target: u64,
    addr: String,
    in_flight: Arc<Semaphore>,
    health: Mutex<Health>,
}

#[derive(Default)]
struct Health {
    /// Since when calls have failed without an answer in between, and how many.
    failing_since: Option<Instant>,
    failures: u64,
}

impl PeerCalls {
    pub fn new(target: u64, addr: &str) -> Arc<PeerCalls> {
        Arc::new(PeerCalls {
            target,
            addr: addr.to_string(),
            in_flight: Arc::new(Semaphore::new(PEER_CALLS_IN_FLIGHT_MAX)),
            health: Mutex::new(Health::default()),
        })
    }

    /// Runs `call` in its own task, bounded by `deadline` plus the grace, and notes how it
    /// ended; None when too many calls to this peer are still in flight, or the call
    /// outlived even the grace.
    pub async fn detached(
        self: &Arc<Self>,
        deadline: Duration,
        call: impl Future<Output = Reply> + Send + 'static,
    ) -> Option<Reply> {
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            self.failed(&format!("{PEER_CALLS_IN_FLIGHT_MAX} calls still in flight"));
            return None;
        };
        let limit = deadline + Duration::from_millis(DETACHED_CALL_GRACE_MS);
        let peer = Arc::clone(self);
        let task = tokio::spawn(async move {
            let out = tokio::time::timeout(limit, call).await.ok();
            drop(permit);
            match &out {
                Some(Ok(_)) => peer.answered(),
                Some(Err(s)) => peer.failed(&s.message()),
                None => peer.failed(&format!("no answer within {} ms", limit.as_millis())),
            }
            out
        });
        task.await.ok().flatten()
    }

    /// Notes an answer; logs once if the peer had been failing.
    pub fn answered(&self) {
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = h.failing_since.take() {
            tracing::info!(
                peer = self.target,
                addr = %self.addr,
                failed_calls = h.failures,
                failing_ms = since.elapsed().as_millis() as u64,
                "raft peer answers again"
            );
        }
        h.failures = 0;
    }

    /// Notes a failed call; logs only the first of a run of failures, since an unreachable
    /// peer is an expected fault that openraft retries every heartbeat.
    pub fn failed(&self, why: &dyn std::fmt::Display) {
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        h.failures += 1;
        if h.failing_since.is_none() {
            h.failing_since = Some(Instant::now());
            tracing::warn!(
                peer = self.target,
                addr = %self.addr,
                error = %why,
                "raft peer not answering; retrying quietly until it does"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_dropped_by_its_caller_still_runs_to_the_end() {
        let calls = PeerCalls::new(2, "peer:1");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let slow = async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(());
            Ok(tonic::Response::new(RaftBytes::default()))
        };
        // The caller gives up long before the call is done, as openraft does at its deadline.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(5),
            calls.detached(Duration::from_millis(100), slow),
        )
        .await;
        assert!(gave_up.is_err());
        assert!(rx.await.is_ok(), "the call finished after its caller left");
    }

    #[tokio::test]
    async fn calls_beyond_the_bound_fail_at_once() {
        let calls = PeerCalls::new(2, "peer:1");
        let hang = std::future::pending::<Reply>;
        let mut waiting = Vec::new();
        for _ in 0..PEER_CALLS_IN_FLIGHT_MAX {
            let c = Arc::clone(&calls);
            waiting.push(tokio::spawn(async move {
                c.detached(Duration::from_secs(60), hang()).await
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let answer = async { Ok(tonic::Response::new(RaftBytes::default())) };
        let over = calls.detached(Duration::from_secs(60), answer).await;
        assert!(
            over.is_none(),
            "call {} is refused",
            PEER_CALLS_IN_FLIGHT_MAX + 1
        );
        for w in waiting {
            w.abort();
        }
    }
}
