//! Waiting out a shaped admission in-process: the library's counterpart of a network
//! caller sleeping `delay_ms` before it sends.

use crate::engine::{AdmitRequest, Decision, Engine};
use leasehold_common::time::Clock;
use std::time::Duration;

/// Decides `req` at `clock.now()`, letting a shaping policy admit it with a delay, and
/// when it did, sleeps until the departure before returning. The decision is returned as
/// made (`delay_ns` tells how long was waited); a refusal returns at once.
///
/// The request's place among the engine's waiting requests is given back as soon as the
/// sleep ends. If the returned future is dropped while it sleeps, the units stay charged
/// (the request may no longer go, but they were spent at their departure time) and the
/// place frees itself at the departure time.
pub async fn admit_and_wait(
    engine: &Engine,
    req: &AdmitRequest<'_>,
    clock: &impl Clock,
) -> Decision {
    let req = AdmitRequest {
        accept_delay: true,
        ..*req
    };
    let decision = engine.admit(&req, clock.now());
    if decision.allowed && decision.delay_ns > 0 {
        tokio::time::sleep(Duration::from_nanos(decision.delay_ns)).await;
        engine.shaped_departed(&decision);
    }
    decision
}
