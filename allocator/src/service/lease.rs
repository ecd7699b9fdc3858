//! The lease service for downstream holders: agents and lower-level allocators.

use super::auth::holder_caller;
use super::convert::{deny_to_pb, lease_to_pb, ledger_status, replica_status};
use super::decide::{Decider, UpstreamDecider};
use super::watch::{watch_stream, WatchSettings};
use crate::replica::Replica;
use crate::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_common::lease::{Lease, LeaseSigner};
use leasehold_common::ledger::{Acquire, HolderCounts, Outcome, Release, Report};
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
}

impl<R: Replica<AllocatorState>> LeaseServer<R> {
    pub fn new(replica: R, signer: Arc<LeaseSigner>, auth: AuthMode, watch: WatchSettings) -> Self {
        LeaseServer {
            decider: Decider::new(replica.clone(), None),
            replica,
            signer,
            auth,
            watch,
        }
    }

    /// Forwards exact decisions on policies owned above this cluster to `upstream`.
    pub fn with_upstream(mut self, upstream: UpstreamDecider) -> Self {
        self.decider = Decider::new(self.replica.clone(), Some(upstream));
        self
    }

    fn signed(&self, mut lease: Lease) -> pb::Lease {
        self.signer.sign(&mut lease);
        lease_to_pb(&lease)
    }

    async fn propose(&self, command: StateCommand) -> Result<Outcome, Status> {
        match self
            .replica
            .propose(command)
            .await
            .map_err(replica_status)?
        {
            StateOutput::Ledger(Ok(o)) => Ok(o),
            StateOutput::Ledger(Err(e)) => Err(ledger_status(&e)),
            other => Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
    }
}

fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

#[tonic::async_trait]
impl<R: Replica<AllocatorState>> LeaseService for LeaseServer<R> {
    async fn acquire(
        &self,
        req: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let r = req.get_ref();
        holder_caller(&self.auth, &req, &r.holder_id)?;
        let acquire = Acquire {
            holder_id: r.holder_id.clone(),
            policy_id: r.policy_id.clone(),
            key: r.key.clone(),
            want_credit: r.want_credit,
            demand_milli_per_sec: r.demand_milli_units_per_sec,
            request_id: r.request_id,
            priority: r.priority,
        };
        let counts = HolderCounts {
            refused: r.refused_units,
            shaped: r.shaped_units,
            fail_open: r.fail_open_units,
        };
        let resp = match self.propose(StateCommand::acquire(acquire, counts)).await? {
            Outcome::Granted(g) => pb::AcquireResponse {
                lease: Some(self.signed(g.lease)),
                ..Default::default()
            },
            Outcome::Denied {
                reason,
                retry_after_ns,
            } => pb::AcquireResponse {
                retry_after_ms: ms(retry_after_ns),
                deny_reason: deny_to_pb(reason) as i32,
                ..Default::default()
            },
            other => return Err(Status::internal(format!("unexpected outcome {other:?}"))),
        };
        Ok(Response::new(resp))
    }

    async fn report(
        &self,
        req: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        let r = req.get_ref();
        holder_caller(&self.auth, &req, &r.holder_id)?;
        let report = Report {
            holder_id: r.holder_id.clone(),
            lease_id: r.lease_id,
            used: r.used,
            return_credit: r.return_credit,
            want_credit: r.want_credit,
            demand_milli_per_sec: r.demand_milli_units_per_sec,
            request_id: r.request_id,
            priority: 0,
        };
        let counts = HolderCounts {
            refused: r.refused_units,
            shaped: r.shaped_units,
            fail_open: r.fail_open_units,
        };
        let cmd = StateCommand::report(report, r.shadow_would_deny, counts);
        match self.propose(cmd).await? {
            Outcome::Granted(g) => {
                let g = *g;
                Ok(Response::new(pb::ReportResponse {
                    lease: Some(self.signed(g.lease)),
                    replacement: g.replacement.map(|l| self.signed(*l)),
                    retry_after_ms: ms(g.retry_after_ns),
                    ..Default::default()
                }))
            }
            other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
        }
    }

    async fn release(
        &self,
        req: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let r = req.get_ref();
        holder_caller(&self.auth, &req, &r.holder_id)?;
        let release = Release {
            holder_id: r.holder_id.clone(),
            lease_id: r.lease_id,
            final_used: r.final_used,
            request_id: r.request_id,
        };
        let counts = HolderCounts {
            refused: r.refused_units,
            shaped: r.shaped_units,
            fail_open: r.fail_open_units,
        };
        match self.propose(StateCommand::release(release, counts)).await? {
            Outcome::Released {
                reclaimed,
                stranded,
            } => Ok(Response::new(pb::ReleaseResponse {
                reclaimed,
                stranded,
            })),
            other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
        }
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
