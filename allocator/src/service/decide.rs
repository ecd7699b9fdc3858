//! Exact decisions at the lease service: decided here when this cluster owns every policy
//! named, forwarded to the upstream cluster when it owns none of them.
//!
//! Ownership is looked up on this node's applied state without a linearizable read: a
//! policy's scope is its owner, and a lagging replica can at worst forward a decision the
//! upstream then refuses as not its own (or propose one the ledger refuses as not owned),
//! never decide one twice.

use super::convert::{ledger_status, replica_status};
use crate::replica::Replica;
use crate::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_client::wire::{decide_items, decided_to_pb};
use leasehold_client::{batch_outcome, Grantor, GrantorError, DECIDE_BATCH_REQUESTS_MAX};
use leasehold_common::ledger::{Command, Decide, Outcome, Refund, DECIDE_ITEMS_MAX};
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::Arc;
use tonic::Status;

/// Where a decision goes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Here,
    Upstream,
}

/// The upstream cluster exact decisions are forwarded to, and the holder id this cluster
/// uses there.
#[derive(Clone)]
pub struct UpstreamDecider {
    pub grantor: Arc<dyn Grantor>,
    pub holder_id: String,
}

/// Answers Decide and Refund for one node.
pub(super) struct Decider<R> {
    replica: R,
    upstream: Option<UpstreamDecider>,
}

impl<R: Replica<AllocatorState>> Decider<R> {
    pub(super) fn new(replica: R, upstream: Option<UpstreamDecider>) -> Self {
        Decider { replica, upstream }
    }

    pub(super) async fn decide(&self, r: pb::DecideRequest) -> Result<pb::DecideResponse, Status> {
        check_items(&r.items)?;
        if self.route(&r.items)? == Route::Upstream {
            let up = self.upstream_for(&r.items)?;
            let forwarded = pb::DecideRequest {
                holder_id: up.holder_id.clone(),
                ..r
            };
            return up.grantor.decide(forwarded).await.map_err(upstream_status);
        }
        let cmd = Command::Decide(Decide {
            items: decide_items(&r.items),
        });
        match self.ledger(cmd).await? {
            Outcome::Decided(d) => Ok(decided_to_pb(&d)),
            other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
        }
    }

    /// Decides each request as `decide` would, all proposed at once so that they share log
    /// entries. When none could be decided the call fails as the first did (so a caller
    /// following the leader moves on); otherwise each request carries its own answer.
    pub(super) async fn decide_batch(
        &self,
        r: pb::DecideBatchRequest,
    ) -> Result<pb::DecideBatchResponse, Status> {
        check_batch(&r)?;
        let holder_id = r.holder_id;
        let calls = r.requests.into_iter().map(|one| {
            self.decide(pb::DecideRequest {
                holder_id: holder_id.clone(),
                ..one
            })
        });
        let answers = futures_util::future::join_all(calls).await;
        if let Some(Err(first)) = answers.first() {
            if answers.iter().all(Result::is_err) {
                return Err(first.clone());
            }
        }
        let outcomes = answers
            .into_iter()
            .map(|a| {
                a.map_err(|s| GrantorError::Refused {
                    code: s.code(),
                    message: s.message().to_string(),
                })
            })
            .map(batch_outcome)
            .collect();
        Ok(pb::DecideBatchResponse { outcomes })
    }

    pub(super) async fn refund(&self, r: pb::RefundRequest) -> Result<pb::RefundResponse, Status> {
        check_items(&r.items)?;
        if self.route(&r.items)? == Route::Upstream {
            let up = self.upstream_for(&r.items)?;
            let forwarded = pb::RefundRequest {
                holder_id: up.holder_id.clone(),
                ..r
            };
            return up.grantor.refund(forwarded).await.map_err(upstream_status);
        }
        let cmd = Command::Refund(Refund {
            items: decide_items(&r.items),
            decided_at: Nanos(r.decided_at_ns),
        });
        match self.ledger(cmd).await? {
            Outcome::Refunded { units } => Ok(pb::RefundResponse { units }),
            other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
        }
    }

    /// Here when this cluster owns every named policy it knows (unknown ones are refused by
    /// the ledger, naming them); upstream when it owns none.
    fn route(&self, items: &[pb::DecideItem]) -> Result<Route, Status> {
        let owned = self.replica.peek(|s| {
            let ledger = s.ledger();
            items
                .iter()
                .map(|i| {
                    ledger
                        .policy(&i.policy_id)
                        .is_none_or(|p| ledger.config().owns(p))
                })
                .collect::<Vec<bool>>()
        });
        let Some(owned) = owned else {
            return Ok(Route::Here);
        };
        match (owned.iter().all(|o| *o), owned.iter().any(|o| *o)) {
            (true, _) => Ok(Route::Here),
            (false, false) => Ok(Route::Upstream),
            (false, true) => Err(Status::failed_precondition(
                "a decision names policies owned at different levels; decide them in separate \
                 requests",
            )),
        }
    }

    fn upstream_for(&self, items: &[pb::DecideItem]) -> Result<&UpstreamDecider, Status> {
        self.upstream.as_ref().ok_or_else(|| {
            Status::failed_precondition(format!(
                "policy '{}' is owned above this cluster, which has no upstream",
                items.first().map_or("", |i| i.policy_id.as_str())
            ))
        })
    }

    async fn ledger(&self, command: Command) -> Result<Outcome, Status> {
        match self
            .replica
            .propose(StateCommand::Ledger(command))
            .await
            .map_err(replica_status)?
        {
            StateOutput::Ledger(Ok(o)) => Ok(o),
            StateOutput::Ledger(Err(e)) => Err(ledger_status(&e)),
            other => Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
    }
}

fn check_items(items: &[pb::DecideItem]) -> Result<(), Status> {
    if items.is_empty() || items.len() > DECIDE_ITEMS_MAX {
        return Err(Status::invalid_argument(format!(
            "items: {} given; a decision names 1 to {DECIDE_ITEMS_MAX}",
            items.len()
        )));
    }
    Ok(())
}

fn check_batch(r: &pb::DecideBatchRequest) -> Result<(), Status> {
    let n = r.requests.len();
    if n == 0 || n > DECIDE_BATCH_REQUESTS_MAX {
        return Err(Status::invalid_argument(format!(
            "requests: {n} given; a batch carries 1 to {DECIDE_BATCH_REQUESTS_MAX}"
        )));
    }
    if let Some((i, other)) = r
        .requests
        .iter()
        .enumerate()
        .find(|(_, q)| !q.holder_id.is_empty() && q.holder_id != r.holder_id)
    {
        return Err(Status::invalid_argument(format!(
            "requests[{i}].holder_id: '{}' differs from the batch's '{}'",
            other.holder_id, r.holder_id
        )));
    }
    Ok(())
}

/// The upstream's answer, passed on: an unreachable upstream is this cluster being
/// unable to serve, so the holder applies its failure behaviour.
fn upstream_status(e: GrantorError) -> Status {
    match e {
        GrantorError::Unreachable(m) => Status::unavailable(format!("upstream: {m}")),
        GrantorError::Refused { code, message } => Status::new(code, message),
        GrantorError::StaleRequest { last } => {
            Status::failed_precondition(format!("upstream: stale request (last {last})"))
        }
    }
}
