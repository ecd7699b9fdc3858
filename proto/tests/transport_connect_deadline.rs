//! The connect deadline of a [`ChannelFactory`] channel covers the whole connection, TLS
//! handshake included: a peer whose kernel accepts connections while the process answers
//! nothing (stopped or hung) costs a call twice the connect timeout, not forever, and an
//! address that drops connection attempts costs it the connect timeout, as UNAVAILABLE.
//! Calls queued on the channel behind that connection wait on it too, so without the
//! deadline one silent node held every call to its address.

use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use leasehold_proto::transport::{
    ChannelFactory, ChannelSettings, ClientTransport, DevPki, PkiSpec, Role,
};
use std::time::{Duration, Instant, SystemTime};

const CONNECT_TIMEOUT_MS: u64 = 300;
/// Longest a call may take here: twice the connect timeout (resolution and TCP, then the
/// TLS handshake) plus scheduling slack on a loaded machine, far below the request timeout.
const CALL_BOUND_MS: u64 = 2_000;

fn factory(transport: ClientTransport) -> ChannelFactory {
    let settings = ChannelSettings {
        connect_timeout_ms: CONNECT_TIMEOUT_MS,
        request_timeout_ms: 30_000,
        ..ChannelSettings::default()
    };
    ChannelFactory::new(settings, transport).unwrap()
}

/// A TCP listener that is never accepted from: the kernel completes the handshake of the
/// first connections and nothing is ever read or written on them.
fn silent_listener() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// Calls `addr` twice at once through `channels`, the second call queued behind the first
/// one's connection attempt: how long until both ended, and their error codes.
async fn call_twice(channels: &ChannelFactory, addr: &str) -> (Duration, Vec<tonic::Code>) {
    let started = Instant::now();
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let mut client = RateLimitServiceClient::new(channels.channel(addr).unwrap());
            tokio::spawn(async move {
                let r = client.should_rate_limit(RateLimitRequest::default()).await;
                r.err().map(|s| s.code())
            })
        })
        .collect();
    let mut codes = Vec::new();
    for call in calls {
        let bound = Duration::from_millis(10 * CALL_BOUND_MS);
        let code = tokio::time::timeout(bound, call)
            .await
            .expect("a call to a silent peer ends")
            .unwrap();
        codes.extend(code);
    }
    (started.elapsed(), codes)
}

#[tokio::test]
async fn a_tls_peer_that_never_answers_costs_a_call_the_connect_timeout() {
    let spec = PkiSpec::local(&["server"], &["gw"], &["ops"]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    let transport = ClientTransport::MutualTls {
        pem: pki.tls_pem(Role::Agent, "gw").unwrap(),
        server_name: Some("localhost".into()),
    };
    let channels = factory(transport);
    let (_listener, addr) = silent_listener();
    let (took, codes) = call_twice(&channels, &addr).await;
    // A handshake out of time surfaces as UNKNOWN (tonic's deadline error is no connect
    // error); either way no call was answered.
    assert_eq!(codes, [tonic::Code::Unknown; 2], "both calls failed");
    assert!(
        took < Duration::from_millis(CALL_BOUND_MS),
        "the calls took {took:?} against a connect timeout of {CONNECT_TIMEOUT_MS} ms"
    );
}

/// A listener whose accept queue is full, so the kernel drops every further SYN to it.
async fn dropping_listener() -> (tokio::net::TcpListener, Vec<tokio::net::TcpStream>, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    while queued.len() < 8 {
        let attempt = tokio::net::TcpStream::connect(addr);
        match tokio::time::timeout(Duration::from_millis(200), attempt).await {
            Ok(Ok(stream)) => queued.push(stream),
            _ => break,
        }
    }
    (listener, queued, addr.to_string())
}

#[tokio::test]
async fn an_address_that_drops_connection_attempts_is_unavailable_within_the_connect_timeout() {
    let channels = factory(ClientTransport::Plaintext);
    let (_listener, _queued, addr) = dropping_listener().await;
    let (took, codes) = call_twice(&channels, &addr).await;
    assert_eq!(codes, [tonic::Code::Unavailable; 2]);
    assert!(
        took < Duration::from_millis(CALL_BOUND_MS),
        "the calls took {took:?} against a connect timeout of {CONNECT_TIMEOUT_MS} ms"
    );
}
