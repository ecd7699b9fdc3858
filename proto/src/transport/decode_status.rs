//! A request whose body is not the method's protobuf message is the caller's mistake:
//! tonic answers it `INTERNAL` (gRPC's status-code table names that code for a server that
//! cannot parse a request), which callers and dashboards read as a fault of the server.
//! Leasehold's servers answer it `INVALID_ARGUMENT` instead, keeping the decoder's reason.
//! Only that answer is rewritten: it is made before any handler runs, as a response with
//! no body whose status is in its headers, and its message is prost's.

use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `grpc-status` of INTERNAL and INVALID_ARGUMENT.
const INTERNAL: &str = "13";
const INVALID_ARGUMENT: &str = "3";
/// How prost's decode error starts, percent-encoded as `grpc-message` carries it.
const DECODE_ERROR: &str = "failed%20to%20decode%20Protobuf%20message";

pin_project! {
    /// A service's response future, with an undecodable request's status rewritten.
    pub struct DecodeStatus<F> {
        #[pin]
        inner: F,
    }
}

impl<F> DecodeStatus<F> {
    /// Wraps the response future `inner`.
    pub fn new(inner: F) -> Self {
        DecodeStatus { inner }
    }
}

impl<F, B, E> Future for DecodeStatus<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map_ok(|mut response| {
            rewrite(response.headers_mut());
            response
        })
    }
}

fn rewrite(headers: &mut http::HeaderMap) {
    let is = |name: &str, prefix: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(prefix))
    };
    if is("grpc-status", INTERNAL) && is("grpc-message", DECODE_ERROR) {
        headers.insert(
            "grpc-status",
            http::HeaderValue::from_static(INVALID_ARGUMENT),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(status: &'static str, message: &'static str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", http::HeaderValue::from_static(status));
        h.insert("grpc-message", http::HeaderValue::from_static(message));
        h
    }

    #[test]
    fn only_an_undecodable_request_becomes_invalid_argument() {
        let mut bad = headers("13", "failed%20to%20decode%20Protobuf%20message:%20x");
        rewrite(&mut bad);
        assert_eq!(bad["grpc-status"], "3");
        assert!(bad["grpc-message"]
            .to_str()
            .unwrap()
            .starts_with(DECODE_ERROR));
        for (status, message) in [("13", "ledger%20failed"), ("3", "bad%20key")] {
            let mut other = headers(status, message);
            rewrite(&mut other);
            assert_eq!(other["grpc-status"], status);
        }
    }
}
