//! Lease calls of one holder sent together (`LeaseBatch`), and each call's answer taken
//! back out of a batch's.

use crate::grantor::{Grantor, GrantorError};
use crate::remote::is_answer;
use leasehold_proto::leasehold::v1 as pb;
use pb::lease_batch_item::Call;
use pb::lease_batch_outcome::Outcome;

/// Most calls one `LeaseBatch` may carry; the allocator refuses more.
pub const LEASE_BATCH_ITEMS_MAX: usize = 1024;

/// A failed call as a batch carries it: the status its own call would have failed with.
pub fn failure(e: GrantorError) -> pb::DecideFailure {
    let (code, message, last_request_id) = match e {
        GrantorError::Refused { code, message } => (code, message, 0),
        GrantorError::Unreachable(m) => (tonic::Code::Unavailable, m, 0),
        GrantorError::StaleRequest { last } => (
            tonic::Code::FailedPrecondition,
            format!("stale request (last {last})"),
            last,
        ),
    };
    pb::DecideFailure {
        code: code as i32,
        message,
        last_request_id,
    }
}

/// The error a call's own failure would have been: an answer about the call (refused,
/// stale) or, for anything else, the grantor not serving it.
pub fn failure_error(f: pb::DecideFailure) -> GrantorError {
    let code = tonic::Code::from(f.code);
    if f.last_request_id > 0 {
        GrantorError::StaleRequest {
            last: f.last_request_id,
        }
    } else if is_answer(code) {
        GrantorError::Refused {
            code,
            message: f.message,
        }
    } else {
        GrantorError::Unreachable(f.message)
    }
}

/// Carries out a batch call by call (all at once): a grantor's `lease_batch` when it has
/// no batch call of its own, and a holder's when its grantor turns out to have none.
pub async fn each_call<G: Grantor + ?Sized>(
    grantor: &G,
    req: pb::LeaseBatchRequest,
) -> pb::LeaseBatchResponse {
    let holder = req.holder_id;
    let calls = req.items.into_iter().map(|item| {
        let holder = holder.clone();
        async move {
            let outcome = match item.call {
                Some(Call::Acquire(mut a)) => {
                    a.holder_id = holder;
                    grantor.acquire(a).await.map(Outcome::Acquired)
                }
                Some(Call::Report(mut r)) => {
                    r.holder_id = holder;
                    grantor.report(r).await.map(Outcome::Reported)
                }
                Some(Call::Release(mut l)) => {
                    l.holder_id = holder;
                    grantor.release(l).await.map(Outcome::Released)
                }
                None => Err(GrantorError::Refused {
                    code: tonic::Code::InvalidArgument,
                    message: "a batch item names no call".into(),
                }),
            };
            pb::LeaseBatchOutcome {
                outcome: Some(outcome.unwrap_or_else(|e| Outcome::Failed(failure(e)))),
            }
        }
    });
    let outcomes = futures_util::future::join_all(calls).await;
    pb::LeaseBatchResponse { outcomes }
}
