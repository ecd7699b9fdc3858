//! Where a holder gets its leases: a remote allocator cluster or an in-process ledger.

use super::wire::{decide_items, decided_to_pb, deny_to_pb, lease_to_pb};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::PolicyParams;
use leasehold_common::ledger::{
    Acquire, Command, Decide, Ledger, LedgerError, Outcome, Refund, Release, Report,
};
use leasehold_common::policy::Policy;
use leasehold_common::time::Clock;
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_client::LeaseServiceClient;
use leasehold_proto::transport::ChannelFactory;
use leasehold_proto::LEADER_METADATA_KEY;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
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

fn no_exact() -> GrantorError {
    GrantorError::Refused {
        code: tonic::Code::Unimplemented,
        message: "this grantor does not decide exact policies".into(),
    }
}

/// An in-process root ledger: the grantor of `--standalone` agents and of tests.
pub struct LocalGrantor {
    ledger: Mutex<Ledger>,
    signer: LeaseSigner,
    clock: Arc<dyn Clock>,
}

impl LocalGrantor {
    pub fn new(ledger: Ledger, signer: LeaseSigner, clock: Arc<dyn Clock>) -> Self {
        LocalGrantor {
            ledger: Mutex::new(ledger),
            signer,
            clock,
        }
    }

    /// Installs the leasable policies (token bucket, GCRA); others are enforced by the
    /// engine itself and need no grantor.
    pub fn install(&self, policies: &[Policy]) -> Result<usize, String> {
        let mut n = 0;
        for p in policies {
            if let Ok(params) = PolicyParams::from_policy(p, 1) {
                self.apply(Command::PutPolicy(params))
                    .map_err(|e| format!("policy {}: {e}", p.id))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Writes off expired leases; call periodically.
    pub fn tick(&self) {
        let _ = self.apply(Command::Tick);
    }

    /// Runs `f` on the ledger (for inspection).
    pub fn with_ledger<R>(&self, f: impl FnOnce(&Ledger) -> R) -> R {
        f(&self.ledger.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn apply(&self, cmd: Command) -> Result<Outcome, leasehold_common::ledger::LedgerError> {
        let now = self.clock.now();
        self.ledger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(now, cmd)
    }

    fn signed(&self, mut lease: leasehold_common::lease::Lease) -> pb::Lease {
        self.signer.sign(&mut lease);
        lease_to_pb(&lease)
    }
}

fn refused(e: impl Into<Refusal>) -> GrantorError {
    match e.into() {
        Refusal::Ledger(LedgerError::StaleRequest { last, .. }) => {
            GrantorError::StaleRequest { last }
        }
        Refusal::Ledger(e) => refused(Refusal::Other(e.to_string())),
        Refusal::Other(message) => GrantorError::Refused {
            code: tonic::Code::FailedPrecondition,
            message,
        },
    }
}

/// Why the in-process ledger refused a request.
enum Refusal {
    Ledger(LedgerError),
    Other(String),
}

impl From<LedgerError> for Refusal {
    fn from(e: LedgerError) -> Self {
        Refusal::Ledger(e)
    }
}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal::Other(message)
    }
}

impl Grantor for LocalGrantor {
    fn acquire(
        &self,
        r: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        let cmd = Command::Acquire(Acquire {
            holder_id: r.holder_id,
            policy_id: r.policy_id,
            key: r.key,
            want_credit: r.want_credit,
            demand_milli_per_sec: r.demand_milli_units_per_sec,
            request_id: r.request_id,
            priority: r.priority,
        });
        let out = match self.apply(cmd) {
            Ok(Outcome::Granted(g)) => Ok(pb::AcquireResponse {
                lease: Some(self.signed(g.lease)),
                ..Default::default()
            }),
            Ok(Outcome::Denied {
                reason,
                retry_after_ns,
            }) => Ok(pb::AcquireResponse {
                retry_after_ms: retry_after_ns.div_ceil(1_000_000),
                deny_reason: deny_to_pb(reason) as i32,
                ..Default::default()
            }),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn report(
        &self,
        r: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        let cmd = Command::Report(Report {
            holder_id: r.holder_id,
            lease_id: r.lease_id,
            used: r.used,
            return_credit: r.return_credit,
            want_credit: r.want_credit,
            demand_milli_per_sec: r.demand_milli_units_per_sec,
            request_id: r.request_id,
            priority: 0,
        });
        let out = match self.apply(cmd) {
            Ok(Outcome::Granted(g)) => {
                let g = *g;
                Ok(pb::ReportResponse {
                    lease: Some(self.signed(g.lease)),
                    replacement: g.replacement.map(|l| self.signed(l)),
                    retry_after_ms: g.retry_after_ns.div_ceil(1_000_000),
                    ..Default::default()
                })
            }
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn release(
        &self,
        r: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        let cmd = Command::Release(Release {
            holder_id: r.holder_id,
            lease_id: r.lease_id,
            final_used: r.final_used,
            request_id: r.request_id,
        });
        let out = match self.apply(cmd) {
            Ok(Outcome::Released {
                reclaimed,
                stranded,
            }) => Ok(pb::ReleaseResponse {
                reclaimed,
                stranded,
            }),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn decide(
        &self,
        r: pb::DecideRequest,
    ) -> BoxFuture<'_, Result<pb::DecideResponse, GrantorError>> {
        let cmd = Command::Decide(Decide {
            items: decide_items(&r.items),
        });
        let out = match self.apply(cmd) {
            Ok(Outcome::Decided(d)) => Ok(decided_to_pb(&d)),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn refund(
        &self,
        r: pb::RefundRequest,
    ) -> BoxFuture<'_, Result<pb::RefundResponse, GrantorError>> {
        let cmd = Command::Refund(Refund {
            items: decide_items(&r.items),
            decided_at: Nanos(r.decided_at_ns),
        });
        let out = match self.apply(cmd) {
            Ok(Outcome::Refunded { units }) => Ok(pb::RefundResponse { units }),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }
}

/// An allocator cluster over gRPC: any node's address will do; a follower's pointer to the
/// leader is followed, and a node that cannot be reached is skipped for the next one.
pub struct RemoteGrantor {
    channels: ChannelFactory,
    addrs: Mutex<Vec<String>>,
    retries_max: usize,
}

impl RemoteGrantor {
    pub fn new(channels: ChannelFactory, addrs: Vec<String>, retries_max: usize) -> Self {
        RemoteGrantor {
            channels,
            addrs: Mutex::new(addrs),
            retries_max: retries_max.max(1),
        }
    }

    fn first(&self) -> Option<String> {
        self.addrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first()
            .cloned()
    }

    /// Moves `addr` to the front (a leader) or the back (unreachable).
    fn prefer(&self, addr: &str, front: bool) {
        let mut a = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        a.retain(|x| x != addr);
        if front {
            a.insert(0, addr.to_string());
        } else {
            a.push(addr.to_string());
        }
    }

    async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, GrantorError>
    where
        F: FnMut(LeaseServiceClient<tonic::transport::Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = GrantorError::Unreachable("no allocator address".into());
        for _ in 0..self.retries_max {
            let Some(addr) = self.first() else { break };
            let channel = self
                .channels
                .channel(&addr)
                .map_err(|e| GrantorError::Unreachable(e.to_string()))?;
            match f(LeaseServiceClient::new(channel)).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if s.code() == tonic::Code::Unavailable => {
                    match s
                        .metadata()
                        .get(LEADER_METADATA_KEY)
                        .and_then(|v| v.to_str().ok())
                    {
                        Some(leader) if !leader.is_empty() && leader != addr => {
                            self.prefer(leader, true)
                        }
                        _ => self.prefer(&addr, false),
                    }
                    last = GrantorError::Unreachable(format!("{addr}: {}", s.message()));
                }
                Err(s) if !is_answer(s.code()) => {
                    self.prefer(&addr, false);
                    last = GrantorError::Unreachable(format!("{addr}: {}", s.message()));
                }
                Err(s) => {
                    let last = s
                        .metadata()
                        .get(leasehold_proto::LAST_REQUEST_ID_METADATA_KEY)
                        .and_then(|v| v.to_str().ok()?.parse().ok());
                    return Err(match last {
                        Some(last) => GrantorError::StaleRequest { last },
                        None => GrantorError::Refused {
                            code: s.code(),
                            message: s.message().to_string(),
                        },
                    });
                }
            }
        }
        Err(last)
    }
}

/// Whether a status is the grantor's answer about the request (the lease is unknown, the
/// caller may not, the request is invalid) rather than a failure to get one: a connection
/// cut mid-call surfaces as `Unknown`, `Cancelled` or `Internal`, and must not make a
/// holder drop a lease it may still spend.
fn is_answer(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        InvalidArgument
            | NotFound
            | AlreadyExists
            | PermissionDenied
            | ResourceExhausted
            | FailedPrecondition
            | OutOfRange
            | Unauthenticated
            | Unimplemented
    )
}

impl Grantor for RemoteGrantor {
    fn acquire(
        &self,
        r: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        Box::pin(self.call(move |mut c| {
            let r = r.clone();
            async move { c.acquire(r).await }
        }))
    }

    fn report(
        &self,
        r: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        Box::pin(self.call(move |mut c| {
            let r = r.clone();
            async move { c.report(r).await }
        }))
    }

    fn release(
        &self,
        r: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        Box::pin(self.call(move |mut c| {
            let r = r.clone();
            async move { c.release(r).await }
        }))
    }

    fn decide(
        &self,
        r: pb::DecideRequest,
    ) -> BoxFuture<'_, Result<pb::DecideResponse, GrantorError>> {
        Box::pin(self.call(move |mut c| {
            let r = r.clone();
            async move { c.decide(r).await }
        }))
    }

    fn refund(
        &self,
        r: pb::RefundRequest,
    ) -> BoxFuture<'_, Result<pb::RefundResponse, GrantorError>> {
        Box::pin(self.call(move |mut c| {
            let r = r.clone();
            async move { c.refund(r).await }
        }))
    }

    fn pushes_changes(&self) -> bool {
        true
    }

    fn watch(&self, r: pb::WatchRequest) -> BoxFuture<'_, Result<WatchStream, GrantorError>> {
        Box::pin(async move {
            let events = self
                .call(move |mut c| {
                    let r = r.clone();
                    async move { c.watch(r).await }
                })
                .await?;
            let stream: WatchStream = Box::pin(tokio_stream::StreamExt::map(events, |item| {
                item.map_err(|s| {
                    GrantorError::Unreachable(format!("watch stream: {}", s.message()))
                })
            }));
            Ok(stream)
        })
    }
}
