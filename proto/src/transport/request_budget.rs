//! One budget of request bytes for all of a server's gRPC calls (the agent's, the
//! allocator's lease and admin services), and a deadline on each request body.
//!
//! The listener's own bounds (connections, streams per connection, message length) are
//! each per connection or per call, so what they allow multiplies: 1 024 connections of
//! 256 streams each holding a 64 KiB message almost complete pin 16 GiB. Every request
//! body is therefore counted, frame by frame as it arrives, against one shared number of
//! bytes; a frame that does not fit fails its call with RESOURCE_EXHAUSTED instead of
//! being buffered, and a body not complete within the deadline fails with
//! DEADLINE_EXCEEDED. Either way the call's bytes are given back at once.
//!
//! An eighth of the budget is kept for calls of at most [`SMALL_CALL_BYTES`]: the
//! rate-limit and admission calls of an honest gateway are a few hundred bytes, so large
//! half-sent calls cannot fill the budget against them. Small half-sent calls can, but only
//! for the body deadline.

use super::decode_status::DecodeStatus;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tonic::server::NamedService;
use tonic::Status;
use tower_service::Service;

/// Default bound on request bytes buffered across all gRPC calls: with the largest message
/// (64 KiB), 512 calls mid-way at once, far beyond what gateways send.
pub const REQUEST_BYTES_BUFFERED_MAX_DEFAULT: usize = 32 << 20;
/// Default time a request body has to arrive whole, in milliseconds. A rate-limit call's
/// body arrives with its headers; one still incomplete after this is stalled or hostile.
pub const REQUEST_BODY_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Calls whose body is at most this many bytes may use the whole budget; larger ones stop
/// an eighth short of it.
pub const SMALL_CALL_BYTES: usize = 4096;

/// The shared count of request bytes buffered, its bound, and what it refused.
#[derive(Debug)]
pub struct RequestBudget {
    max_bytes: usize,
    /// Bound for calls past [`SMALL_CALL_BYTES`]: `max_bytes` less the small calls' reserve.
    large_max_bytes: usize,
    body_timeout: Duration,
    buffered: AtomicUsize,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

impl RequestBudget {
    /// A budget of `max_bytes`, with bodies due within `body_timeout_ms`.
    pub fn new(max_bytes: usize, body_timeout_ms: u64) -> Self {
        RequestBudget {
            max_bytes,
            large_max_bytes: max_bytes - max_bytes / 8,
            body_timeout: Duration::from_millis(body_timeout_ms),
            buffered: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        }
    }

    /// Counts `n` more bytes of a call that already holds `held`; false (nothing counted)
    /// when they do not fit.
    pub fn try_charge(&self, held: usize, n: usize) -> bool {
        let bound = if held.saturating_add(n) <= SMALL_CALL_BYTES {
            self.max_bytes
        } else {
            self.large_max_bytes
        };
        self.buffered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                b.checked_add(n).filter(|total| *total <= bound)
            })
            .is_ok()
    }

    /// Gives back `n` bytes counted earlier.
    pub fn release(&self, n: usize) {
        if n > 0 {
            self.buffered.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// The bound, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Request bytes counted now.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.load(Ordering::Acquire)
    }

    /// Calls failed because their next frame did not fit.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Calls failed because their body was not complete in time.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }

    fn refusal(&self) -> Status {
        self.refused.fetch_add(1, Ordering::Relaxed);
        Status::resource_exhausted(format!(
            "this server is buffering request_bytes_buffered_max ({} bytes) of requests; retry",
            self.max_bytes
        ))
    }

    fn timeout(&self) -> Status {
        self.timed_out.fetch_add(1, Ordering::Relaxed);
        Status::deadline_exceeded(format!(
            "request body not complete within request_body_timeout_ms ({} ms)",
            self.body_timeout.as_millis()
        ))
    }
}

/// A gRPC service whose request bodies are counted against a [`RequestBudget`], and whose
/// answer to a request that does not decode is `INVALID_ARGUMENT` ([`DecodeStatus`]).
#[derive(Clone, Debug)]
pub struct Budgeted<S> {
    inner: S,
    budget: Arc<RequestBudget>,
}

impl<S> Budgeted<S> {
    /// `inner`, its request bodies counted against `budget`.
    pub fn new(inner: S, budget: Arc<RequestBudget>) -> Self {
        Budgeted { inner, budget }
    }
}

impl<S: NamedService> NamedService for Budgeted<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, R> Service<http::Request<B>> for Budgeted<S>
where
    S: Service<http::Request<BudgetedBody<B>>, Response = http::Response<R>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = DecodeStatus<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let budget = Arc::clone(&self.budget);
        DecodeStatus::new(
            self.inner
                .call(req.map(|body| BudgetedBody::new(body, budget))),
        )
    }
}

/// A request body counted against a [`RequestBudget`] as its frames arrive, and given
/// back when it ends, fails or is dropped.
#[derive(Debug)]
pub struct BudgetedBody<B> {
    inner: B,
    budget: Arc<RequestBudget>,
    held: usize,
    /// When the body must have ended; `None` once it has (or failed).
    due: Option<Instant>,
    /// A timer for `due`, made only once the body has kept its reader waiting: most bodies
    /// arrive whole with their headers, and a timer per call costs more than the call.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> BudgetedBody<B> {
    /// `inner`, due whole within the budget's body timeout from now. Needs a Tokio runtime.
    pub fn new(inner: B, budget: Arc<RequestBudget>) -> Self {
        let due = Some(Instant::now() + budget.body_timeout);
        BudgetedBody {
            inner,
            budget,
            held: 0,
            due,
            timer: None,
        }
    }

    fn finish(&mut self) {
        self.due = None;
        self.timer = None;
        self.budget.release(std::mem::take(&mut self.held));
    }
}

impl<B> Drop for BudgetedBody<B> {
    fn drop(&mut self) {
        self.budget.release(self.held);
    }
}

impl<B> Body for BudgetedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let Some(due) = this.due else {
            return Poll::Ready(None);
        };
        // Checked before reading on: a body trickling a byte at a time is never Pending.
        if Instant::now() >= due {
            this.finish();
            return Poll::Ready(Some(Err(this.budget.timeout())));
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                if timer.as_mut().poll(cx).is_ready() {
                    this.finish();
                    return Poll::Ready(Some(Err(this.budget.timeout())));
                }
                return Poll::Pending;
            }
            Poll::Ready(None) => {
                this.finish();
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish();
                return Poll::Ready(Some(Err(Status::from_error(e.into()))));
            }
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        if let Some(data) = frame.data_ref() {
            if !this.budget.try_charge(this.held, data.len()) {
                this.finish();
                return Poll::Ready(Some(Err(this.budget.refusal())));
            }
            this.held += data.len();
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.due.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
