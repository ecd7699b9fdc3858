//! An allocator cluster as a grantor, over gRPC: leader following and retries.

use crate::addr_order::AddrOrder;
use crate::grantor::{BoxFuture, Grantor, GrantorError, WatchStream};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_client::LeaseServiceClient;
use leasehold_proto::transport::ChannelFactory;
use leasehold_proto::LEADER_METADATA_KEY;
use std::future::Future;
use std::sync::Mutex;

/// An allocator cluster over gRPC: any node's address will do; a follower's pointer to the
/// leader is followed, and a node that cannot be reached is skipped for the next one.
pub struct RemoteGrantor {
    channels: ChannelFactory,
    addrs: Mutex<AddrOrder>,
    retries_max: usize,
}

impl RemoteGrantor {
    pub fn new(channels: ChannelFactory, addrs: Vec<String>, retries_max: usize) -> Self {
        RemoteGrantor {
            channels,
            addrs: Mutex::new(AddrOrder::new(addrs)),
            retries_max: retries_max.max(1),
        }
    }

    fn order(&self) -> std::sync::MutexGuard<'_, AddrOrder> {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, GrantorError>
    where
        F: FnMut(LeaseServiceClient<tonic::transport::Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = GrantorError::Unreachable("no allocator address".into());
        let mut tried: Vec<String> = Vec::new();
        for _ in 0..self.retries_max {
            let Some(addr) = self.order().next(&tried) else {
                break;
            };
            tried.push(addr.clone());
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
                            self.order().leader_named(leader, &tried);
                        }
                        _ => self.order().unreachable(&addr),
                    }
                    last = GrantorError::Unreachable(format!("{addr}: {}", s.message()));
                }
                Err(s) if !is_answer(s.code()) => {
                    self.order().unreachable(&addr);
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
pub(crate) fn is_answer(code: tonic::Code) -> bool {
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

    fn decide_batch(
        &self,
        r: pb::DecideBatchRequest,
    ) -> BoxFuture<'_, Result<pb::DecideBatchResponse, GrantorError>> {
        Box::pin(self.call(move |mut c| {
            let r = r.clone();
            async move { c.decide_batch(r).await }
        }))
    }

    fn lease_batch(
        &self,
        r: pb::LeaseBatchRequest,
    ) -> BoxFuture<'_, Result<pb::LeaseBatchResponse, GrantorError>> {
        Box::pin(self.call(move |mut c| {
            let r = r.clone();
            async move { c.lease_batch(r).await }
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
