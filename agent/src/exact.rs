//! Forwarding exact decisions (`enforcement: exact`) to the allocator that owns the policy.
//!
//! A request whose dimensions include exact policies costs one decision at the allocator
//! (the decisions of concurrent requests share calls, [`CoalescingGrantor`]): the engine
//! names the keys ([`Engine::exact_asks`]), the allocator's leader admits or refuses them
//! all in one replicated command, and the engine decides the whole request with those
//! verdicts ([`Engine::admit_decided`]). A call that does not answer within
//! `decide_timeout_ms` (or a grantor that cannot be reached) leaves the exact dimensions
//! to their policy's failure behaviour. When the allocator admitted but another dimension
//! of the request refused, the units are refunded in the background, at most
//! [`REFUNDS_IN_FLIGHT_MAX`] at a time; a refund that cannot be sent leaves them counted,
//! which only ever admits less. Requests without exact dimensions go straight to the
//! engine.

use crate::engine::{AdmitRequest, Decision, Engine, ExactAsk, ExactVerdict, ExactVerdicts};
use leasehold_client::{CoalesceLimits, CoalescingGrantor, Grantor, GrantorError};
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Default wait for the allocator's decision, in milliseconds.
pub const DECIDE_TIMEOUT_MS_DEFAULT: u64 = 500;
/// Refund calls outstanding at once; beyond it a refund is dropped (and counted).
pub const REFUNDS_IN_FLIGHT_MAX: usize = 64;

/// Counts of exact decisions, for metrics.
#[derive(Debug, Default)]
pub struct ExactCounters {
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    /// Decisions the allocator did not give (unreachable, timed out, or refused the call).
    pub unanswered: AtomicU64,
    pub refunds_sent: AtomicU64,
    pub refunds_dropped: AtomicU64,
}

/// What the allocator answered for one request's exact dimensions.
#[derive(Clone, Debug, Default)]
pub struct Asked {
    asks: Vec<ExactAsk>,
    verdicts: ExactVerdicts,
    /// Set when the allocator admitted (and so charged) the items: the decision's time on
    /// its timeline, for a refund.
    charged_at_ns: Option<u64>,
}

impl Asked {
    /// Nothing to ask: the request has no exact dimension.
    pub fn is_empty(&self) -> bool {
        self.asks.is_empty()
    }
}

/// The engine with a way to the allocator for exact dimensions.
pub struct ExactGate {
    engine: Arc<Engine>,
    grantor: Option<Arc<dyn Grantor>>,
    holder_id: String,
    timeout: Duration,
    refunds: Arc<Semaphore>,
    counters: Arc<ExactCounters>,
}

impl ExactGate {
    /// A gate with no allocator: exact dimensions follow their failure behaviour.
    pub fn new(engine: Arc<Engine>) -> Self {
        ExactGate {
            engine,
            grantor: None,
            holder_id: String::new(),
            timeout: Duration::from_millis(DECIDE_TIMEOUT_MS_DEFAULT),
            refunds: Arc::new(Semaphore::new(REFUNDS_IN_FLIGHT_MAX)),
            counters: Arc::default(),
        }
    }

    /// Decides exact dimensions at `grantor`, as `holder_id`, waiting at most
    /// `decide_timeout_ms` for each answer.
    pub fn with_grantor(
        mut self,
        grantor: Arc<dyn Grantor>,
        holder_id: impl Into<String>,
        decide_timeout_ms: u64,
    ) -> Self {
        self.holder_id = holder_id.into();
        // Concurrent requests' decisions share calls; refunds pass straight through.
        self.grantor = Some(Arc::new(CoalescingGrantor::new(
            grantor,
            self.holder_id.clone(),
            CoalesceLimits::default(),
        )));
        self.timeout = Duration::from_millis(decide_timeout_ms.max(1));
        self
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn counters(&self) -> &ExactCounters {
        &self.counters
    }

    /// Decides `req` at the time `now` gives, asking the allocator first if it has exact
    /// dimensions.
    pub async fn admit(&self, req: &AdmitRequest<'_>, now: impl Fn() -> Nanos) -> Decision {
        match self.begin(req, now()) {
            Ok(decision) => decision,
            Err(asks) => {
                let asked = self.ask(asks).await;
                self.finish(req, now(), &asked)
            }
        }
    }

    /// Decides `req` at `now` at once when it has no exact dimension; otherwise the asks the
    /// allocator must answer first (then [`ask`](Self::ask) and [`finish`](Self::finish)).
    /// A caller that cannot hold the request across the wait builds it twice only then.
    pub fn begin(&self, req: &AdmitRequest<'_>, now: Nanos) -> Result<Decision, Vec<ExactAsk>> {
        let asks = self.engine.exact_asks(req);
        if asks.is_empty() {
            return Ok(self.engine.admit(req, now));
        }
        Err(asks)
    }

    /// Asks the allocator about `asks` (nothing to do when empty).
    pub async fn ask(&self, asks: Vec<ExactAsk>) -> Asked {
        let mut asked = Asked {
            asks,
            ..Asked::default()
        };
        if asked.asks.is_empty() {
            return asked;
        }
        let answer = match &self.grantor {
            Some(g) => tokio::time::timeout(self.timeout, g.decide(self.request(&asked.asks)))
                .await
                .unwrap_or_else(|_| Err(GrantorError::Unreachable("decide timed out".into()))),
            None => Err(GrantorError::Unreachable("no allocator".into())),
        };
        match answer {
            Ok(resp) => {
                let counter = match resp.admitted {
                    true => &self.counters.admitted,
                    false => &self.counters.refused,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                asked.verdicts = verdicts_of(&asked.asks, &resp);
                asked.charged_at_ns = resp.admitted.then_some(resp.decided_at_ns);
            }
            Err(e) => {
                self.counters.unanswered.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "exact decision unanswered; failure behaviour applies");
                for a in &asked.asks {
                    asked.verdicts.set(a.index, ExactVerdict::Unreachable);
                }
            }
        }
        asked
    }

    /// Decides `req` at `now` with the allocator's answers, and refunds what it charged if
    /// the request is refused after all.
    pub fn finish(&self, req: &AdmitRequest<'_>, now: Nanos, asked: &Asked) -> Decision {
        if asked.is_empty() {
            return self.engine.admit(req, now);
        }
        let decision = self.engine.admit_decided(req, now, &asked.verdicts);
        if let (false, Some(at)) = (decision.allowed, asked.charged_at_ns) {
            self.refund(&asked.asks, at);
        }
        decision
    }

    fn request(&self, asks: &[ExactAsk]) -> pb::DecideRequest {
        pb::DecideRequest {
            holder_id: self.holder_id.clone(),
            items: items(asks),
            decision_id: 0,
        }
    }

    fn refund(&self, asks: &[ExactAsk], decided_at_ns: u64) {
        let (Some(grantor), Ok(permit)) = (&self.grantor, self.refunds.clone().try_acquire_owned())
        else {
            self.counters
                .refunds_dropped
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        let (grantor, counters) = (Arc::clone(grantor), Arc::clone(&self.counters));
        let req = pb::RefundRequest {
            holder_id: self.holder_id.clone(),
            items: items(asks),
            decided_at_ns,
        };
        let timeout = self.timeout;
        tokio::spawn(async move {
            let sent = tokio::time::timeout(timeout, grantor.refund(req)).await;
            let counter = match sent {
                Ok(Ok(_)) => &counters.refunds_sent,
                _ => &counters.refunds_dropped,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

fn items(asks: &[ExactAsk]) -> Vec<pb::DecideItem> {
    asks.iter()
        .map(|a| pb::DecideItem {
            policy_id: a.policy_id.to_string(),
            key: a.key.clone(),
            units: a.units,
        })
        .collect()
}

/// The allocator's answer by dimension. A refused request refuses every exact dimension
/// (none was charged), each with the wait of the item that did not fit.
fn verdicts_of(asks: &[ExactAsk], resp: &pb::DecideResponse) -> ExactVerdicts {
    let ns = |ms: u64| ms.saturating_mul(1_000_000);
    let retry_after_ns = ns(resp
        .verdicts
        .iter()
        .filter(|v| !v.fits)
        .map(|v| v.retry_after_ms)
        .max()
        .unwrap_or(0));
    let mut out = ExactVerdicts::default();
    for (i, a) in asks.iter().enumerate() {
        let v = resp.verdicts.get(i);
        let remaining = v.map_or(0, |v| v.remaining);
        let reset_after_ns = v.map_or(0, |v| ns(v.reset_after_ms));
        let verdict = if resp.admitted {
            ExactVerdict::Admitted {
                remaining,
                reset_after_ns,
            }
        } else {
            ExactVerdict::Denied {
                remaining,
                retry_after_ns,
                reset_after_ns,
            }
        };
        out.set(a.index, verdict);
    }
    out
}
