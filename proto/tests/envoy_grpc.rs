//! Envoy calls `/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over HTTP/2;
//! the generated server must answer on exactly that path. The client here is a raw gRPC
//! client given the path as a literal, so a server registered under any other name fails.

use std::net::SocketAddr;

use leasehold_proto::envoy::service::ratelimit::v3::{
    rate_limit_response::{Code, DescriptorStatus},
    rate_limit_service_client::RateLimitServiceClient,
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer, SERVICE_NAME},
    RateLimitRequest, RateLimitResponse,
};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

const SHOULD_RATE_LIMIT_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Answers OVER_LIMIT for domain `deny`, OK otherwise, echoing one status per descriptor.
struct Stub;

#[tonic::async_trait]
impl RateLimitService for Stub {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let code = if request.domain == "deny" {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let status = DescriptorStatus {
            code: code as i32,
            ..Default::default()
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: code as i32,
            statuses: vec![status; request.descriptors.len()],
            ..Default::default()
        }))
    }
}

async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        Server::builder()
            .add_service(RateLimitServiceServer::new(Stub))
            .serve_with_incoming(incoming),
    );
    addr
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn request(domain: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![Default::default(); 2],
        hits_addend: 0,
    }
}

#[test]
fn service_name_is_envoys() {
    assert_eq!(SERVICE_NAME, "envoy.service.ratelimit.v3.RateLimitService");
}

#[tokio::test]
async fn server_answers_on_envoys_literal_path() {
    let addr = serve().await;
    let mut grpc = tonic::client::Grpc::new(channel(addr).await);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<RateLimitRequest, RateLimitResponse>::default();
    let response = grpc
        .unary(
            Request::new(request("deny")),
            PathAndQuery::from_static(SHOULD_RATE_LIMIT_PATH),
            codec,
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    assert_eq!(response.statuses.len(), 2);
}

#[tokio::test]
async fn server_rejects_other_paths_as_unimplemented() {
    let addr = serve().await;
    let mut grpc = tonic::client::Grpc::new(channel(addr).await);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<RateLimitRequest, RateLimitResponse>::default();
    let status = grpc
        .unary(
            Request::new(request("ok")),
            PathAndQuery::from_static(
                "/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit",
            ),
            codec,
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
}

#[tokio::test]
async fn generated_client_reaches_generated_server() {
    let addr = serve().await;
    let mut client = RateLimitServiceClient::new(channel(addr).await);
    let response = client
        .should_rate_limit(request("ok"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.overall_code, Code::Ok as i32);
}
