//! When each agent first received each of its leases, recorded on the agent's side of the
//! wire: the allocator's books say what a lease was settled as, not from when its holder
//! could spend it.

use super::clock::sim_now_ns;
use leasehold_agent::lease::grantor::BoxFuture;
use leasehold_agent::lease::{Grantor, GrantorError, WatchStream};
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// (agent, lease id) → simulated time the agent first received the lease, in nanoseconds;
/// and per agent the last time any answer of its grantor reached it.
#[derive(Clone, Debug, Default)]
pub struct LeaseReceipts {
    first: Arc<Mutex<BTreeMap<(u32, u64), u64>>>,
    last_heard: Arc<Mutex<BTreeMap<u32, u64>>>,
}

impl LeaseReceipts {
    /// Notes that `agent` holds `lease_id` now, unless it received it before.
    fn note(&self, agent: u32, lease_id: u64) {
        self.note_at(agent, lease_id, sim_now_ns());
    }

    /// Notes that `agent` received `lease_id` at `at_ns`, unless it received it before.
    pub fn note_at(&self, agent: u32, lease_id: u64, at_ns: u64) {
        self.lock().entry((agent, lease_id)).or_insert(at_ns);
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
        self.lock().get(&(agent, lease_id)).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(u32, u64), u64>> {
        self.first.lock().unwrap_or_else(|e| e.into_inner())
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
            self.receipts.note(self.agent, l.lease_id);
        }
    }
}

impl Grantor for ReceiptGrantor {
    fn acquire(
        &self,
        req: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        Box::pin(async move {
            let resp = self.inner.acquire(req).await?;
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
            let resp = self.inner.report(req).await?;
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
            let resp = self.inner.release(req).await?;
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
