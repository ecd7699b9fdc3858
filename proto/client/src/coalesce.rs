//! Exact decisions that wait together leave together: one `DecideBatch` call carries every
//! decision asked for while the previous calls were under way.
//!
//! Every Decide call pays the same fixed costs whatever it decides: a TLS record each way, an
//! HTTP/2 stream, the caller's authorisation, a wake-up of the handler. Under load those
//! costs, not the decisions, fill the allocator's cores. [`CoalescingGrantor`] sends at most
//! `batches_in_flight_max` calls at once; decisions asked for meanwhile queue (at most
//! `waiting_max`) and the next call takes up to `batch_requests_max` of them. A lone
//! decision on an idle connection still leaves at once, so batching adds no wait of its own:
//! batches grow only while calls are already outstanding.
//!
//! Each decision keeps its own answer: a batch is decided request by request, as separate
//! Decide calls would be. A decision the batch could not place (the node lost its leadership
//! mid-batch) is retried on its own through the wrapped grantor, which follows the leader.
//! An allocator without `DecideBatch` is remembered and then asked one decision at a time.

use crate::grantor::{BoxFuture, Grantor, GrantorError, WatchStream};
use crate::remote::is_answer;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// Most requests one `DecideBatch` call may carry; the allocator refuses more.
pub const DECIDE_BATCH_REQUESTS_MAX: usize = 256;

/// Limits of a [`CoalescingGrantor`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoalesceLimits {
    /// Most decisions in one call (at most [`DECIDE_BATCH_REQUESTS_MAX`]).
    pub batch_requests_max: usize,
    /// Most calls outstanding at once.
    pub batches_in_flight_max: usize,
    /// Most decisions waiting for a call; beyond it a decision is refused at once.
    pub waiting_max: usize,
}

impl Default for CoalesceLimits {
    fn default() -> Self {
        CoalesceLimits {
            batch_requests_max: DECIDE_BATCH_REQUESTS_MAX,
            batches_in_flight_max: 4,
            waiting_max: 4096,
        }
    }
}

type Answer = Result<pb::DecideResponse, GrantorError>;

struct Waiting {
    request: pb::DecideRequest,
    reply: oneshot::Sender<Answer>,
}

/// A grantor whose exact decisions are sent in batches; every other call goes straight
/// to the wrapped grantor.
pub struct CoalescingGrantor {
    inner: Arc<dyn Grantor>,
    holder_id: String,
    limits: CoalesceLimits,
    /// The queue to the task that sends batches, started with the first decision (it needs
    /// the caller's runtime).
    queue: OnceLock<mpsc::Sender<Waiting>>,
    unsupported: Arc<AtomicBool>,
}

impl CoalescingGrantor {
    /// Batches `holder_id`'s decisions to `inner`. Limits of zero are raised to one, and a
    /// batch size above [`DECIDE_BATCH_REQUESTS_MAX`] is lowered to it.
    pub fn new(inner: Arc<dyn Grantor>, holder_id: String, limits: CoalesceLimits) -> Self {
        let limits = CoalesceLimits {
            batch_requests_max: limits
                .batch_requests_max
                .clamp(1, DECIDE_BATCH_REQUESTS_MAX),
            batches_in_flight_max: limits.batches_in_flight_max.max(1),
            waiting_max: limits.waiting_max.max(1),
        };
        CoalescingGrantor {
            inner,
            holder_id,
            limits,
            queue: OnceLock::new(),
            unsupported: Arc::new(AtomicBool::new(false)),
        }
    }

    fn queue(&self) -> &mpsc::Sender<Waiting> {
        self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(self.limits.waiting_max);
            let sender = BatchSender {
                inner: Arc::clone(&self.inner),
                holder_id: self.holder_id.clone(),
                unsupported: Arc::clone(&self.unsupported),
            };
            tokio::spawn(sender.run(rx, self.limits.clone()));
            tx
        })
    }

    async fn decide_queued(&self, request: pb::DecideRequest) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.queue()
            .try_send(Waiting { request, reply })
            .map_err(|_| GrantorError::Refused {
                code: tonic::Code::ResourceExhausted,
                message: format!(
                    "{} exact decisions already wait for the allocator (waiting_max)",
                    self.limits.waiting_max
                ),
            })?;
        answer.await.unwrap_or_else(|_| {
            Err(GrantorError::Unreachable(
                "the decision sender stopped".into(),
            ))
        })
    }
}

/// The task's half: takes what waits, sends it, hands out the answers.
#[derive(Clone)]
struct BatchSender {
    inner: Arc<dyn Grantor>,
    holder_id: String,
    unsupported: Arc<AtomicBool>,
}

impl BatchSender {
    async fn run(self, mut queue: mpsc::Receiver<Waiting>, limits: CoalesceLimits) {
        let in_flight = Arc::new(Semaphore::new(limits.batches_in_flight_max));
        while let Some(first) = queue.recv().await {
            let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
                return;
            };
            // Whatever arrived while every call was out goes in this one, except decisions
            // whose caller stopped waiting: sending them would only charge for nothing.
            let mut batch = Vec::with_capacity(limits.batch_requests_max);
            let mut next = Some(first);
            while let Some(w) = next {
                if !w.reply.is_closed() {
                    batch.push(w);
                }
                if batch.len() == limits.batch_requests_max {
                    break;
                }
                next = queue.try_recv().ok();
            }
            if batch.is_empty() {
                continue;
            }
            tokio::spawn(self.clone().send(batch, permit));
        }
    }

    async fn send(self, batch: Vec<Waiting>, _permit: OwnedSemaphorePermit) {
        if batch.len() == 1 || self.unsupported.load(Ordering::Relaxed) {
            self.one_by_one(batch).await;
            return;
        }
        let (requests, replies): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|w| (w.request, w.reply)).unzip();
        let call = pb::DecideBatchRequest {
            holder_id: self.holder_id.clone(),
            requests: requests.clone(),
        };
        match self.inner.decide_batch(call).await {
            Ok(resp) if resp.outcomes.len() == replies.len() => {
                let mut retry = Vec::new();
                for ((outcome, reply), request) in
                    resp.outcomes.into_iter().zip(replies).zip(requests)
                {
                    match outcome_answer(outcome) {
                        Placed::Answer(a) => {
                            let _ = reply.send(a);
                        }
                        Placed::Retry => retry.push(Waiting { request, reply }),
                    }
                }
                self.one_by_one(retry).await;
            }
            Ok(resp) => {
                let e = GrantorError::Unreachable(format!(
                    "the allocator answered {} decisions of a batch of {}",
                    resp.outcomes.len(),
                    replies.len()
                ));
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
            Err(GrantorError::Refused {
                code: tonic::Code::Unimplemented,
                ..
            }) => {
                self.unsupported.store(true, Ordering::Relaxed);
                let again = requests
                    .into_iter()
                    .zip(replies)
                    .map(|(request, reply)| Waiting { request, reply })
                    .collect();
                self.one_by_one(again).await;
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Decides each on its own, all at once.
    async fn one_by_one(&self, batch: Vec<Waiting>) {
        let calls = batch.into_iter().map(|w| async move {
            let _ = w.reply.send(self.inner.decide(w.request).await);
        });
        futures_util::future::join_all(calls).await;
    }
}

enum Placed {
    Answer(Answer),
    /// Not decided for a reason a call elsewhere could overcome (not the leader).
    Retry,
}

fn outcome_answer(o: pb::DecideBatchOutcome) -> Placed {
    use pb::decide_batch_outcome::Outcome;
    match o.outcome {
        Some(Outcome::Decided(d)) => Placed::Answer(Ok(d)),
        Some(Outcome::Failed(f)) => {
            let code = tonic::Code::from(f.code);
            if is_answer(code) {
                Placed::Answer(Err(GrantorError::Refused {
                    code,
                    message: f.message,
                }))
            } else {
                Placed::Retry
            }
        }
        None => Placed::Answer(Err(GrantorError::Unreachable(
            "the allocator answered a decision with nothing".into(),
        ))),
    }
}

impl Grantor for CoalescingGrantor {
    fn acquire(
        &self,
        req: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        self.inner.acquire(req)
    }

    fn report(
        &self,
        req: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        self.inner.report(req)
    }

    fn release(
        &self,
        req: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        self.inner.release(req)
    }

    fn decide(&self, req: pb::DecideRequest) -> BoxFuture<'_, Answer> {
        Box::pin(self.decide_queued(req))
    }

    fn decide_batch(
        &self,
        req: pb::DecideBatchRequest,
    ) -> BoxFuture<'_, Result<pb::DecideBatchResponse, GrantorError>> {
        self.inner.decide_batch(req)
    }

    fn lease_batch(
        &self,
        req: pb::LeaseBatchRequest,
    ) -> BoxFuture<'_, Result<pb::LeaseBatchResponse, GrantorError>> {
        self.inner.lease_batch(req)
    }

    fn refund(
        &self,
        req: pb::RefundRequest,
    ) -> BoxFuture<'_, Result<pb::RefundResponse, GrantorError>> {
        self.inner.refund(req)
    }

    fn pushes_changes(&self) -> bool {
        self.inner.pushes_changes()
    }

    fn watch(&self, req: pb::WatchRequest) -> BoxFuture<'_, Result<WatchStream, GrantorError>> {
        self.inner.watch(req)
    }
}
