//! The lease service for downstream holders: agents and lower-level allocators.

use super::auth::holder_caller;
use super::call_counts::{CallKind, LeaseCallCounts};
use super::convert::replica_status;
use super::decide::{Decider, UpstreamDecider};
use super::lease_batch::lease_batch;
use super::lease_calls::{
    acquire_answer, acquire_command, propose_outcome, release_answer, release_command,
    report_answer, report_command,
};
use super::watch::{watch_stream, WatchSettings};
use crate::replica::Replica;
use crate::state::{AllocatorState, StateCommand};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::Outcome;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_server::LeaseService;
use leasehold_proto::transport::AuthMode;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct LeaseServer<R> {
    replica: R,
    signer: Arc<LeaseSigner>,
    auth: AuthMode,
    watch: WatchSettings,
    decider: Decider<R>,
    counts: Arc<LeaseCallCounts>,
}

impl<R: Replica<AllocatorState>> LeaseServer<R> {
    pub fn new(replica: R, signer: Arc<LeaseSigner>, auth: AuthMode, watch: WatchSettings) -> Self {
        LeaseServer {
            decider: Decider::new(replica.clone(), None),
            replica,
            signer,
            auth,
            watch,
            counts: Arc::default(),
        }
    }

    /// Counts the lease calls this server applies into `counts` (for the node's metrics).
    pub fn with_counts(mut self, counts: Arc<LeaseCallCounts>) -> Self {
        self.counts = counts;
        self
    }

    /// Forwards exact decisions on policies owned above this cluster to `upstream`.
    pub fn with_upstream(mut self, upstream: UpstreamDecider) -> Self {
        self.decider = Decider::new(self.replica.clone(), Some(upstream));
        self
    }

    async fn propose(&self, kind: CallKind, command: StateCommand) -> Result<Outcome, Status> {
        propose_outcome(&self.replica, &self.counts, kind, command).await
    }
}

#[tonic::async_trait]
impl<R: Replica<AllocatorState>> LeaseService for LeaseServer<R> {
    async fn acquire(
        &self,
        req: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let r = req.get_ref();
        holder_caller(&self.auth, &req, &r.holder_id)?;
        let outcome = self.propose(CallKind::Acquire, acquire_command(r)).await?;
        Ok(Response::new(acquire_answer(Some(&self.signer), outcome)?))
    }

    async fn report(
        &self,
        req: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        let r = req.get_ref();
        holder_caller(&self.auth, &req, &r.holder_id)?;
        let outcome = self.propose(CallKind::Report, report_command(r)).await?;
        Ok(Response::new(report_answer(Some(&self.signer), outcome)?))
    }

    async fn release(
        &self,
        req: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let r = req.get_ref();
        holder_caller(&self.auth, &req, &r.holder_id)?;
        let outcome = self.propose(CallKind::Release, release_command(r)).await?;
        Ok(Response::new(release_answer(outcome)?))
    }

    async fn lease_batch(
        &self,
        req: Request<pb::LeaseBatchRequest>,
    ) -> Result<Response<pb::LeaseBatchResponse>, Status> {
        holder_caller(&self.auth, &req, &req.get_ref().holder_id)?;
        let answered = lease_batch(
            &self.replica,
            Some(&self.signer),
            &self.counts,
            req.into_inner(),
        )
        .await?;
        Ok(Response::new(answered))
    }

    async fn decide(
        &self,
        req: Request<pb::DecideRequest>,
    ) -> Result<Response<pb::DecideResponse>, Status> {
        holder_caller(&self.auth, &req, &req.get_ref().holder_id)?;
        let decided = self.decider.decide(req.into_inner()).await?;
        Ok(Response::new(decided))
    }

    async fn decide_batch(
        &self,
        req: Request<pb::DecideBatchRequest>,
    ) -> Result<Response<pb::DecideBatchResponse>, Status> {
        holder_caller(&self.auth, &req, &req.get_ref().holder_id)?;
        let decided = self.decider.decide_batch(req.into_inner()).await?;
        Ok(Response::new(decided))
    }

    async fn refund(
        &self,
        req: Request<pb::RefundRequest>,
    ) -> Result<Response<pb::RefundResponse>, Status> {
        holder_caller(&self.auth, &req, &req.get_ref().holder_id)?;
        let refunded = self.decider.refund(req.into_inner()).await?;
        Ok(Response::new(refunded))
    }

    type WatchStream = tokio_stream::wrappers::ReceiverStream<Result<pb::WatchEvent, Status>>;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        holder_caller(&self.auth, &req, &req.get_ref().holder_id)?;
        let r = req.into_inner();
        // A follower refuses the call itself with the leader's address, before streaming.
        self.replica.read(|_| ()).await.map_err(replica_status)?;
        Ok(Response::new(watch_stream(
            self.replica.clone(),
            r,
            self.watch.clone(),
        )))
    }
}
