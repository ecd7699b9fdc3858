//! A round's calls upstream, sent together: one `LeaseBatch` call for every key that needs
//! one (more only beyond [`LEASE_BATCH_ITEMS_MAX`] keys), so the upstream's calls and
//! replicated commands grow with the number of regions, not with their keys.

use super::UpstreamCounters;
use leasehold_client::{each_call, failure_error, Grantor, GrantorError, LEASE_BATCH_ITEMS_MAX};
use leasehold_proto::leasehold::v1 as pb;
use pb::lease_batch_item::Call;
use pb::lease_batch_outcome::Outcome as Answer;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub struct BatchSender {
    grantor: Arc<dyn Grantor>,
    holder_id: String,
    counters: Arc<UpstreamCounters>,
    /// The upstream answered `Unimplemented` to a batch (an older version): its calls go
    /// one by one from then on.
    unsupported: AtomicBool,
    /// The upstream answered a batch: it has `LeaseBatch`.
    supported: AtomicBool,
}

/// Each call's answer, in call order.
pub type Answers = Vec<Result<Answer, GrantorError>>;

impl BatchSender {
    pub fn new(
        grantor: Arc<dyn Grantor>,
        holder_id: String,
        counters: Arc<UpstreamCounters>,
    ) -> Self {
        BatchSender {
            grantor,
            holder_id,
            counters,
            unsupported: AtomicBool::new(false),
            supported: AtomicBool::new(false),
        }
    }

    /// Sends `calls`, at most [`LEASE_BATCH_ITEMS_MAX`] to a batch, the batches at once;
    /// each call's answer, in call order.
    pub async fn send(&self, mut calls: Vec<Call>) -> Answers {
        let mut batches = Vec::with_capacity(calls.len().div_ceil(LEASE_BATCH_ITEMS_MAX));
        while !calls.is_empty() {
            let rest = calls.split_off(calls.len().min(LEASE_BATCH_ITEMS_MAX));
            batches.push(self.one_batch(std::mem::replace(&mut calls, rest)));
        }
        futures_util::future::join_all(batches)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    fn request(&self, calls: Vec<Call>) -> pb::LeaseBatchRequest {
        pb::LeaseBatchRequest {
            holder_id: self.holder_id.clone(),
            items: calls
                .into_iter()
                .map(|c| pb::LeaseBatchItem { call: Some(c) })
                .collect(),
        }
    }

    async fn one_batch(&self, calls: Vec<Call>) -> Answers {
        let n = calls.len();
        let req = self.request(calls);
        if self.unsupported.load(Relaxed) {
            return answers(each_call(&*self.grantor, req).await, n);
        }
        self.counters.batch_calls.fetch_add(1, Relaxed);
        // Only an upstream without batches needs the calls again: a copy is kept until the
        // upstream has answered a batch once.
        let items = (!self.supported.load(Relaxed)).then(|| req.items.clone());
        match self.grantor.lease_batch(req).await {
            Ok(resp) => {
                self.supported.store(true, Relaxed);
                answers(resp, n)
            }
            Err(GrantorError::Refused {
                code: tonic::Code::Unimplemented,
                ..
            }) => {
                tracing::info!("the upstream has no LeaseBatch; sending its calls one by one");
                self.unsupported.store(true, Relaxed);
                let again = pb::LeaseBatchRequest {
                    holder_id: self.holder_id.clone(),
                    items: items.unwrap_or_default(),
                };
                answers(each_call(&*self.grantor, again).await, n)
            }
            // A refusal of the batch as a whole says nothing about any one lease: no call's
            // lease may be closed over it, so each call counts as not served.
            Err(GrantorError::Refused { code, message }) => all_failed(
                n,
                GrantorError::Unreachable(format!("batch refused ({code:?}): {message}")),
            ),
            Err(e) => all_failed(n, e),
        }
    }
}

fn all_failed(n: usize, e: GrantorError) -> Answers {
    vec![Err(e); n]
}

fn answers(resp: pb::LeaseBatchResponse, n: usize) -> Answers {
    if resp.outcomes.len() != n {
        return all_failed(
            n,
            GrantorError::Unreachable(format!(
                "the upstream answered {} calls of a batch of {n}",
                resp.outcomes.len()
            )),
        );
    }
    resp.outcomes
        .into_iter()
        .map(|o| match o.outcome {
            Some(Answer::Failed(f)) => Err(failure_error(f)),
            Some(answer) => Ok(answer),
            None => Err(GrantorError::Unreachable(
                "the upstream answered a call with nothing".into(),
            )),
        })
        .collect()
}
