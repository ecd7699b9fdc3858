//! The engine the admission benchmark and the `admit_vs_governor` example measure.

use leasehold_agent::credit::SlotState;
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};

/// A billion units a second, with a burst of a thousand seconds' worth: an agent holds a
/// share of it, and each admission works out the time until the burst is whole again (a
/// millisecond period keeps that product in 64 bits, as for rates of everyday sizes).
const LEASED: &str = "rate: {units: 1000000, per: 1ms}\nburst: 1000000000000\n";
/// A billion units a second, a second's worth of burst.
const LOCAL: &str = "rate: {units: 1000000000, per: 1s}\nburst: 1000000000\n";

/// A tenth of the leased policy's burst, as an agent holds a share of it.
pub const SHARE: u64 = 100_000_000_000;

fn policy(id: &str, body: &str) -> Policy {
    Policy::from_yaml(&format!(
        "id: {id}\ndimensions: [{{name: tenant, required: true}}]\n{body}"
    ))
    .expect("valid policy")
}

/// An engine whose `leased` key `acme` holds `credit` units, with two local policies
/// beside it: `tenant` (token bucket) and `route` (GCRA).
pub fn engine(credit: u64) -> Engine {
    let engine = Engine::builder()
        .build(RuleSource::from_policies([
            policy("leased", LEASED),
            policy("tenant", &format!("{LOCAL}scope: process\n")),
            policy(
                "route",
                &format!("{LOCAL}scope: process\nalgorithm: gcra\n"),
            ),
        ]))
        .expect("valid rules");
    let queue = engine.take_acquire_queue().expect("first take");
    let dims = [Dimension::policy("leased", &[("tenant", "acme")])];
    engine.admit(&AdmitRequest::new(&dims), Nanos(0));
    let slot = queue.try_recv().expect("an acquire was queued").slot;
    slot.deposit(credit, u64::MAX);
    slot.set_state(SlotState::Active);
    engine
}

/// The engine's time, in nanoseconds, handed out in runs that continue one from another, so
/// that no thread's time goes back between runs (a decision clamps and counts a reading
/// that does, which is not what an agent does on every request).
static TIME: AtomicU64 = AtomicU64::new(1);

/// The first of `n` nanoseconds of the engine's time that no other run is handed.
pub fn reserve_ns(n: u64) -> u64 {
    TIME.fetch_add(n, Ordering::Relaxed)
}
