//! The lease service's answers without gRPC: a [`Grantor`] over a replica in the same
//! process. A holder driven through it (a region's upstream driver, a simulated agent)
//! meets exactly the commands and answers the lease service gives over the network.

use super::call_counts::{CallKind, LeaseCallCounts};
use super::lease_batch::lease_batch;
use super::lease_calls::{
    acquire_answer, acquire_command, last_request_id, propose_outcome, release_answer,
    release_command, report_answer, report_command,
};
use crate::replica::Replica;
use crate::state::{AllocatorState, StateCommand};
use leasehold_client::{BoxFuture, Grantor, GrantorError};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::Outcome;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::Arc;
use tonic::Status;

/// A grantor over `replica`, signing with `signer` (None: leases go unsigned, for holders
/// that verify nothing).
pub struct ReplicaGrantor<R> {
    replica: R,
    signer: Option<Arc<LeaseSigner>>,
    counts: LeaseCallCounts,
}

impl<R: Replica<AllocatorState>> ReplicaGrantor<R> {
    pub fn new(replica: R, signer: Option<Arc<LeaseSigner>>) -> Self {
        ReplicaGrantor {
            replica,
            signer,
            counts: LeaseCallCounts::default(),
        }
    }

    /// The calls answered so far.
    pub fn counts(&self) -> &LeaseCallCounts {
        &self.counts
    }

    async fn outcome(&self, kind: CallKind, command: StateCommand) -> Result<Outcome, Status> {
        propose_outcome(&self.replica, &self.counts, kind, command).await
    }
}

/// The error a remote holder would have seen for `s`.
fn grantor_error(s: Status) -> GrantorError {
    match (last_request_id(&s), s.code()) {
        (Some(last), _) => GrantorError::StaleRequest { last },
        (None, tonic::Code::Unavailable) => GrantorError::Unreachable(s.message().to_string()),
        (None, code) => GrantorError::Refused {
            code,
            message: s.message().to_string(),
        },
    }
}

impl<R: Replica<AllocatorState>> Grantor for ReplicaGrantor<R> {
    fn acquire(
        &self,
        r: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        Box::pin(async move {
            let o = self.outcome(CallKind::Acquire, acquire_command(&r)).await;
            o.and_then(|o| acquire_answer(self.signer.as_deref(), o))
                .map_err(grantor_error)
        })
    }

    fn report(
        &self,
        r: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        Box::pin(async move {
            let o = self.outcome(CallKind::Report, report_command(&r)).await;
            o.and_then(|o| report_answer(self.signer.as_deref(), o))
                .map_err(grantor_error)
        })
    }

    fn release(
        &self,
        r: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        Box::pin(async move {
            let o = self.outcome(CallKind::Release, release_command(&r)).await;
            o.and_then(release_answer).map_err(grantor_error)
        })
    }

    fn lease_batch(
        &self,
        r: pb::LeaseBatchRequest,
    ) -> BoxFuture<'_, Result<pb::LeaseBatchResponse, GrantorError>> {
        Box::pin(async move {
            lease_batch(&self.replica, self.signer.as_deref(), &self.counts, r)
                .await
                .map_err(grantor_error)
        })
    }
}
