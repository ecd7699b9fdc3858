//! The lease protocol as a holder uses it, whoever grants: a remote cluster or a ledger in
//! the same process.

use leasehold_proto::leasehold::v1 as pb;
use std::future::Future;
use std::pin::Pin;
use thiserror::Error;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A holder's watch stream; it ends when the grantor closes it.
pub type WatchStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::WatchEvent, GrantorError>> + Send>>;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum GrantorError {
    #[error("grantor unreachable: {0}")]
    Unreachable(String),
    #[error("refused ({code:?}): {message}")]
    Refused { code: tonic::Code, message: String },
    /// The request id is not above the last one the grantor saw from this holder for the
    /// key (a restarted holder whose wall clock stepped back): nothing was applied.
    #[error("request id is stale; the grantor has seen {last}")]
    StaleRequest { last: u64 },
}

/// The lease protocol as a holder uses it.
pub trait Grantor: Send + Sync + 'static {
    fn acquire(
        &self,
        req: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>>;
    fn report(
        &self,
        req: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>>;
    fn release(
        &self,
        req: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>>;

    /// Decides one request of exact policies (`enforcement: exact`).
    fn decide(
        &self,
        _req: pb::DecideRequest,
    ) -> BoxFuture<'_, Result<pb::DecideResponse, GrantorError>> {
        Box::pin(std::future::ready(Err(no_exact())))
    }

    /// Decides several independent requests in one call; each answer is what `decide`
    /// would have given for its request. Without a batch call of its own, a grantor
    /// decides them one by one.
    fn decide_batch(
        &self,
        req: pb::DecideBatchRequest,
    ) -> BoxFuture<'_, Result<pb::DecideBatchResponse, GrantorError>> {
        Box::pin(async move {
            let holder_id = req.holder_id;
            let calls = req.requests.into_iter().map(|mut one| {
                one.holder_id = holder_id.clone();
                self.decide(one)
            });
            let outcomes = futures_util::future::join_all(calls)
                .await
                .into_iter()
                .map(batch_outcome)
                .collect();
            Ok(pb::DecideBatchResponse { outcomes })
        })
    }

    /// Acquires, reports and releases on many keys in one call; each answer is what its
    /// own call would have given. Without a batch call of its own, a grantor carries the
    /// calls out one by one.
    fn lease_batch(
        &self,
        req: pb::LeaseBatchRequest,
    ) -> BoxFuture<'_, Result<pb::LeaseBatchResponse, GrantorError>> {
        Box::pin(async move { Ok(crate::lease_batch::each_call(self, req).await) })
    }

    /// Gives back what an admitted decision charged.
    fn refund(
        &self,
        _req: pb::RefundRequest,
    ) -> BoxFuture<'_, Result<pb::RefundResponse, GrantorError>> {
        Box::pin(std::future::ready(Err(no_exact())))
    }

    /// True when the grantor pushes changes on a watch stream; a grantor without one is
    /// not watched (its stream would only ever look silent).
    fn pushes_changes(&self) -> bool {
        false
    }

    /// Opens the holder's watch stream (policy changes, emergency switches, revocations).
    /// A grantor without one returns a stream that never yields.
    fn watch(&self, _req: pb::WatchRequest) -> BoxFuture<'_, Result<WatchStream, GrantorError>> {
        let never: WatchStream = Box::pin(tokio_stream::pending());
        Box::pin(std::future::ready(Ok(never)))
    }
}

/// One decision's answer as a batch carries it.
pub fn batch_outcome(answer: Result<pb::DecideResponse, GrantorError>) -> pb::DecideBatchOutcome {
    use pb::decide_batch_outcome::Outcome;
    let outcome = match answer {
        Ok(d) => Outcome::Decided(d),
        Err(e) => Outcome::Failed(crate::lease_batch::failure(e)),
    };
    pb::DecideBatchOutcome {
        outcome: Some(outcome),
    }
}

fn no_exact() -> GrantorError {
    GrantorError::Refused {
        code: tonic::Code::Unimplemented,
        message: "this grantor does not decide exact policies".into(),
    }
}
