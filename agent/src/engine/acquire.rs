//! The hand-off from the hot path to the lease manager: "this key needs a lease".
//!
//! The first request for a leased key with no lease moves the key's slot from `Idle` to
//! `Acquiring` (one compare-and-swap, so exactly one request asks) and pushes an
//! [`AcquireRequest`] into a bounded queue. The lease manager drains it, asks the grantor,
//! deposits credit into the slot and sets its state. A full queue refuses the push and puts
//! the slot back to `Idle`, so a later request asks again: the hot path never blocks.

use crate::credit::CreditSlot;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// A key whose first lease should be acquired.
#[derive(Debug)]
pub struct AcquireRequest {
    pub policy_id: Arc<str>,
    pub policy_version: u64,
    /// Canonical policy key (see `leasehold_common::key`).
    pub key: Box<str>,
    /// The slot the hot path spends from; deposit the granted credit here.
    pub slot: Arc<CreditSlot>,
    /// Priority of the request that asked, for the grantor's reserve and fair share.
    pub priority: u8,
    /// Source of the request that asked ([`AdmitRequest::source`](super::AdmitRequest)):
    /// the lease manager takes first leases from each source in turn.
    pub source: u32,
}

/// The receiving end the lease manager drains.
pub type AcquireReceiver = Receiver<AcquireRequest>;

pub(crate) fn channel(capacity: usize) -> (SyncSender<AcquireRequest>, AcquireReceiver) {
    std::sync::mpsc::sync_channel(capacity.max(1))
}

/// Pushes without blocking; false when the queue is full or nobody drains it.
pub(crate) fn try_push(tx: &SyncSender<AcquireRequest>, request: AcquireRequest) -> bool {
    match tx.try_send(request) {
        Ok(()) => true,
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
    }
}
