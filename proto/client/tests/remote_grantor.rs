//! The remote grantor against stand-in allocator nodes on loopback: it follows the leader a
//! follower names and remembers it, skips a node it cannot reach or whose connection broke,
//! and takes a refusal as the cluster's answer instead of asking another node.

use leasehold_client::{Grantor, GrantorError, RemoteGrantor};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_server::{LeaseService, LeaseServiceServer};
use leasehold_proto::transport::{
    serve_router, server_builder, ChannelFactory, ChannelSettings, ClientTransport,
};
use leasehold_proto::{LAST_REQUEST_ID_METADATA_KEY, LEADER_METADATA_KEY};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tonic::{Code, Request, Response, Status};

/// How a stand-in node answers every acquire.
#[derive(Clone)]
enum Answer {
    /// A lease with this id.
    Grant(u64),
    /// UNAVAILABLE, naming the leader.
    FollowerOf(String),
    /// This status, with the last request id seen when given.
    Fail(Code, Option<u64>),
}

struct StandIn {
    answer: Answer,
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl LeaseService for StandIn {
    async fn acquire(
        &self,
        _: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.answer {
            Answer::Grant(lease_id) => Ok(Response::new(pb::AcquireResponse {
                lease: Some(pb::Lease {
                    lease_id: *lease_id,
                    ..Default::default()
                }),
                ..Default::default()
            })),
            Answer::FollowerOf(leader) => {
                let mut s = Status::unavailable("not the leader");
                s.metadata_mut()
                    .insert(LEADER_METADATA_KEY, leader.parse().unwrap());
                Err(s)
            }
            Answer::Fail(code, last) => {
                let mut s = Status::new(*code, "refused");
                if let Some(last) = last {
                    s.metadata_mut().insert(
                        LAST_REQUEST_ID_METADATA_KEY,
                        last.to_string().parse().unwrap(),
                    );
                }
                Err(s)
            }
        }
    }

    async fn report(
        &self,
        _: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        Err(Status::unimplemented("report"))
    }

    async fn release(
        &self,
        _: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        Err(Status::unimplemented("release"))
    }

    type WatchStream = tokio_stream::Empty<Result<pb::WatchEvent, Status>>;

    async fn watch(
        &self,
        _: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("watch"))
    }

    async fn decide(
        &self,
        _: Request<pb::DecideRequest>,
    ) -> Result<Response<pb::DecideResponse>, Status> {
        Err(Status::unimplemented("decide"))
    }

    async fn refund(
        &self,
        _: Request<pb::RefundRequest>,
    ) -> Result<Response<pb::RefundResponse>, Status> {
        Err(Status::unimplemented("refund"))
    }

    async fn decide_batch(
        &self,
        _: Request<pb::DecideBatchRequest>,
    ) -> Result<Response<pb::DecideBatchResponse>, Status> {
        Err(Status::unimplemented("decide_batch"))
    }

    async fn lease_batch(
        &self,
        _: Request<pb::LeaseBatchRequest>,
    ) -> Result<Response<pb::LeaseBatchResponse>, Status> {
        Err(Status::unimplemented("lease_batch"))
    }
}

/// A running stand-in node: its address and how many acquires reached it.
struct Node {
    addr: String,
    calls: Arc<AtomicUsize>,
}

impl Node {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

async fn start(answer: Answer) -> Node {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = StandIn {
        answer,
        calls: Arc::clone(&calls),
    };
    let router = server_builder(None)
        .unwrap()
        .add_service(LeaseServiceServer::new(service));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve_router(router, listener, std::future::pending()));
    Node { addr, calls }
}

/// An address nothing listens on.
fn nobody() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

fn grantor(addrs: &[&str]) -> RemoteGrantor {
    let channels = ChannelFactory::new(ChannelSettings::default(), ClientTransport::Plaintext);
    let addrs = addrs.iter().map(|a| a.to_string()).collect();
    RemoteGrantor::new(channels.unwrap(), addrs, 3)
}

async fn acquire(g: &RemoteGrantor) -> Result<u64, GrantorError> {
    let answer = g.acquire(pb::AcquireRequest::default()).await?;
    Ok(answer.lease.map_or(0, |l| l.lease_id))
}

#[tokio::test]
async fn a_follower_names_the_leader_and_later_calls_go_there_first() {
    let leader = start(Answer::Grant(7)).await;
    let follower = start(Answer::FollowerOf(leader.addr.clone())).await;
    let g = grantor(&[&follower.addr]);
    assert_eq!(acquire(&g).await, Ok(7));
    assert_eq!(acquire(&g).await, Ok(7));
    assert_eq!(follower.calls(), 1, "the leader is remembered");
    assert_eq!(leader.calls(), 2);
}

#[tokio::test]
async fn a_node_that_cannot_be_reached_is_skipped() {
    let leader = start(Answer::Grant(7)).await;
    let dead = nobody();
    let g = grantor(&[&dead, &leader.addr]);
    assert_eq!(acquire(&g).await, Ok(7));
}

#[tokio::test]
async fn a_lost_leader_that_a_follower_still_names_is_not_asked_again_in_the_same_call() {
    let lost = nobody();
    let stale = start(Answer::FollowerOf(lost.clone())).await;
    let leader = start(Answer::Grant(7)).await;
    let g = grantor(&[&lost, &stale.addr, &leader.addr]);
    assert_eq!(acquire(&g).await, Ok(7));
    assert_eq!(stale.calls(), 1);
}

#[tokio::test]
async fn a_broken_call_is_no_answer_and_the_next_node_is_asked() {
    let leader = start(Answer::Grant(7)).await;
    for code in [Code::Unknown, Code::Internal, Code::Cancelled] {
        let broken = start(Answer::Fail(code, None)).await;
        let g = grantor(&[&broken.addr, &leader.addr]);
        assert_eq!(acquire(&g).await, Ok(7), "{code:?}");
    }
}

#[tokio::test]
async fn a_refusal_is_the_clusters_answer() {
    let leader = start(Answer::Grant(7)).await;
    let refusing = start(Answer::Fail(Code::PermissionDenied, None)).await;
    let g = grantor(&[&refusing.addr, &leader.addr]);
    let refused = acquire(&g).await.unwrap_err();
    assert!(
        matches!(
            refused,
            GrantorError::Refused {
                code: Code::PermissionDenied,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(leader.calls(), 0);
}

#[tokio::test]
async fn a_stale_request_says_which_id_the_grantor_has_seen() {
    let node = start(Answer::Fail(Code::FailedPrecondition, Some(41))).await;
    let g = grantor(&[&node.addr]);
    assert_eq!(
        acquire(&g).await,
        Err(GrantorError::StaleRequest { last: 41 })
    );
}

#[tokio::test]
async fn when_every_node_fails_the_grantor_is_unreachable() {
    let (a, b) = (nobody(), nobody());
    let g = grantor(&[&a, &b]);
    let e = acquire(&g).await.unwrap_err();
    assert!(matches!(e, GrantorError::Unreachable(_)), "{e:?}");
}
