//! When each agent first received each of its leases, recorded on the agent's side of the
//! wire: the allocator's books say what a lease was settled as, not from when its holder
//! could spend it.

use super::clock::sim_now_ns;
use leasehold_client::{BoxFuture, Grantor, GrantorError, WatchStream};
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Every version of a lease each agent received and when, and per agent the last time any
/// answer of its grantor reached it.
#[derive(Clone, Debug, Default)]
pub struct LeaseReceipts {
    last_heard: Arc<Mutex<BTreeMap<u32, u64>>>,
    /// Per agent and lease version (lease id, when the grantor issued it): when the agent
    /// first received that version, and how long it is valid.
    versions: Arc<Mutex<BTreeMap<VersionKey, LeaseVersion>>>,
    /// Calls the agents made to their grantor (acquire, report, release), answered or not.
    calls: Arc<AtomicU64>,
    /// Calls sent and not yet answered or failed.
    in_flight: Arc<AtomicU64>,
}

impl LeaseReceipts {
    /// Notes that `agent` holds `lease` now.
    fn note(&self, agent: u32, lease: &pb::Lease) {
        self.note_version_at(
            agent,
            lease.lease_id,
            lease.issued_at_ns,
            sim_now_ns(),
            lease.ttl_ms,
        );
    }

    /// Notes that `agent` received the version of `lease_id` issued at `issued_at_ns` (on
    /// the grantor's timeline), valid for `ttl_ms`, at `at_ns`, unless it received that
    /// version before.
    pub fn note_version_at(
        &self,
        agent: u32,
        lease_id: u64,
        issued_at_ns: u64,
        at_ns: u64,
        ttl_ms: u64,
    ) {
        let mut versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions
            .entry((agent, lease_id, issued_at_ns))
            .or_insert(LeaseVersion {
                received_ns: at_ns,
                ttl_ns: ttl_ms.saturating_mul(1_000_000),
            });
    }

    /// Every version of a lease `agent` received, in no particular order.
    pub fn versions(&self, agent: u32) -> Vec<LeaseVersion> {
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions
            .range((agent, 0, 0)..=(agent, u64::MAX, u64::MAX))
            .map(|(_, v)| *v)
            .collect()
    }

    /// Per agent of `agents`: when it received each lease version, in time order.
    pub fn received_ns(&self, agents: usize) -> Vec<Vec<u64>> {
        (0..agents as u32)
            .map(|a| {
                let mut at: Vec<u64> = self.versions(a).iter().map(|v| v.received_ns).collect();
                at.sort_unstable();
                at
            })
            .collect()
    }

    /// Calls the agents made to their grantor so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Calls on the wire now: sent and neither answered nor failed.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Counts a call from when it is sent until it is answered or fails.
    async fn call<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _on_the_wire = InFlight(&self.in_flight);
        f.await
    }

    /// Notes that an answer of its grantor (a grant, a refusal with a retry hint, a
    /// renewal, a release) reached `agent` now.
    fn heard(&self, agent: u32) {
        let at_ns = sim_now_ns();
        let mut last = self.last_heard.lock().unwrap_or_else(|e| e.into_inner());
        let t = last.entry(agent).or_insert(at_ns);
        *t = (*t).max(at_ns);
    }

    /// The last time an answer of its grantor reached `agent`, if one ever did.
    pub fn last_heard_ns(&self, agent: u32) -> Option<u64> {
        let last = self.last_heard.lock().unwrap_or_else(|e| e.into_inner());
        last.get(&agent).copied()
    }

    /// When `agent` first received `lease_id`, if it ever did.
    pub fn received_at_ns(&self, agent: u32, lease_id: u64) -> Option<u64> {
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions
            .range((agent, lease_id, 0)..=(agent, lease_id, u64::MAX))
            .map(|(_, v)| v.received_ns)
            .min()
    }
}

/// (agent, lease id, when the grantor issued the version on its timeline).
type VersionKey = (u32, u64, u64);

/// One version of a lease (a grant or a renewal) as its holder received it. The grantor
/// issued it before it arrived, so it expires no later than `received_ns + ttl_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseVersion {
    pub received_ns: u64,
    pub ttl_ns: u64,
}

/// Takes a call off the in-flight count when it ends, even if the caller gives up on it.
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A grantor that notes every lease its answers carry, then hands them to the lease
/// manager unchanged.
pub struct ReceiptGrantor {
    pub inner: Arc<dyn Grantor>,
    pub agent: u32,
    pub receipts: LeaseReceipts,
}

impl ReceiptGrantor {
    fn note(&self, lease: Option<&pb::Lease>) {
        if let Some(l) = lease {
            self.receipts.note(self.agent, l);
        }
    }
}

impl Grantor for ReceiptGrantor {
    fn acquire(
        &self,
        req: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        Box::pin(async move {
            let resp = self.receipts.call(self.inner.acquire(req)).await?;
            self.receipts.heard(self.agent);
            self.note(resp.lease.as_ref());
            Ok(resp)
        })
    }

    fn report(
        &self,
        req: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        Box::pin(async move {
            let resp = self.receipts.call(self.inner.report(req)).await?;
            self.receipts.heard(self.agent);
            self.note(resp.lease.as_ref());
            self.note(resp.replacement.as_ref());
            Ok(resp)
        })
    }

    fn release(
        &self,
        req: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        Box::pin(async move {
            let resp = self.receipts.call(self.inner.release(req)).await?;
            self.receipts.heard(self.agent);
            Ok(resp)
        })
    }

    fn pushes_changes(&self) -> bool {
        self.inner.pushes_changes()
    }

    fn watch(&self, req: pb::WatchRequest) -> BoxFuture<'_, Result<WatchStream, GrantorError>> {
        self.inner.watch(req)
    }
}
