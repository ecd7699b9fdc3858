//! Failure behaviours of leased policies when the grantor is unreachable, and the wait
//! for a key's first lease.

use leasehold_agent::credit::{CreditSlot, SlotState};
use leasehold_agent::engine::{
    AdmitRequest, DenyReason, Dimension, Engine, EngineLimits, Outcome, RuleSource,
};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use std::sync::Arc;

const SEC: u64 = 1_000_000_000;
const WAIT_NS: u64 = 100_000_000;

fn engine_with(failure: &str, limits: EngineLimits) -> Engine {
    let yaml = format!(
        "id: api\ndimensions: [{{name: tenant, required: true}}]\n\
         rate: {{units: 10, per: 1s}}\nburst: 100\nfailure: {failure}\n"
    );
    let policy = Policy::from_yaml(&yaml).unwrap();
    Engine::builder()
        .limits(EngineLimits {
            acquire_wait_max_ns: WAIT_NS,
            ..limits
        })
        .build(RuleSource::from_policies([policy]))
        .unwrap()
}

fn engine(failure: &str) -> Engine {
    engine_with(failure, EngineLimits::default())
}

const DIMS: [Dimension<'static>; 1] = [Dimension {
    target: leasehold_agent::engine::Target::Policy("api"),
    entries: &[("tenant", "acme")],
}];

fn admit(e: &Engine, priority: u8, now: u64) -> Outcome {
    let req = AdmitRequest {
        priority,
        ..AdmitRequest::new(&DIMS)
    };
    let d = e.admit(&req, Nanos(now));
    assert_eq!(d.allowed, d.results[0].outcome.allows());
    d.results[0].outcome
}

/// Creates the key, grants `credit` until `deadline`, then cuts the grantor off.
fn unreachable_with_credit(e: &Engine, credit: u64, deadline: u64) -> Arc<CreditSlot> {
    let rx = e.take_acquire_queue().unwrap();
    admit(e, 0, 0);
    let slot = rx.try_recv().unwrap().slot;
    slot.deposit(credit, deadline);
    slot.set_state(SlotState::Unreachable);
    slot
}

#[test]
fn fail_closed_refuses_even_with_credit_in_hand() {
    let e = engine("{mode: fail_closed}");
    let slot = unreachable_with_credit(&e, 5, 10 * SEC);
    assert_eq!(admit(&e, 255, 1), Outcome::Denied(DenyReason::Unreachable));
    assert_eq!(slot.remaining(), 5, "nothing spent");
    slot.set_state(SlotState::Active);
    assert_eq!(admit(&e, 0, 2), Outcome::Admitted, "reachable again");
}

#[test]
fn cached_lease_spends_until_credit_or_deadline_runs_out() {
    let e = engine("{mode: cached_lease}");
    let slot = unreachable_with_credit(&e, 3, 10 * SEC);
    for _ in 0..3 {
        assert_eq!(admit(&e, 0, 1), Outcome::Admitted);
    }
    assert_eq!(admit(&e, 0, 1), Outcome::Denied(DenyReason::Unreachable));
    slot.deposit(5, 10 * SEC);
    assert_eq!(admit(&e, 0, 2), Outcome::Admitted);
    assert_eq!(
        admit(&e, 0, 10 * SEC),
        Outcome::Denied(DenyReason::Unreachable),
        "the lease deadline ends cached spending"
    );
    assert_eq!(slot.remaining(), 4);
}

#[test]
fn fail_open_spends_held_credit_then_admits_uncharged() {
    let e = engine("{mode: fail_open}");
    let slot = unreachable_with_credit(&e, 2, 10 * SEC);
    assert_eq!(admit(&e, 0, 1), Outcome::Admitted);
    assert_eq!(admit(&e, 0, 1), Outcome::Admitted);
    for _ in 0..5 {
        assert_eq!(admit(&e, 0, 1), Outcome::FailOpen);
    }
    assert_eq!(slot.remaining(), 0);
    let c = e.stats().policies[0].counters;
    assert_eq!((c.admitted, c.fail_open, c.rejected), (2, 5, 1));
}

#[test]
fn restricted_admits_only_high_priority_at_the_emergency_rate() {
    let e = engine("{mode: restricted, min_priority: 5, rate: {units: 2, per: 1s}}");
    let slot = unreachable_with_credit(&e, 50, 10 * SEC);
    assert_eq!(admit(&e, 4, 1), Outcome::Denied(DenyReason::Restricted));
    assert_eq!(admit(&e, 5, 1), Outcome::Restricted);
    assert_eq!(admit(&e, 9, 1), Outcome::Restricted);
    assert_eq!(admit(&e, 9, 1), Outcome::Denied(DenyReason::Restricted));
    assert_eq!(
        admit(&e, 9, 1 + SEC / 2),
        Outcome::Restricted,
        "2 per second"
    );
    assert_eq!(
        slot.remaining(),
        50,
        "leased credit is not spent while restricted"
    );
    let c = e.stats().policies[0].counters;
    assert_eq!(c.restricted, 3);
}

#[test]
fn a_first_lease_that_never_comes_falls_to_the_failure_behaviour() {
    let e = engine("{mode: fail_open}");
    let _rx = e.take_acquire_queue().unwrap();
    assert_eq!(admit(&e, 0, 0), Outcome::Denied(DenyReason::AwaitingLease));
    let d = e.admit(&AdmitRequest::new(&DIMS), Nanos(WAIT_NS / 2));
    assert_eq!(
        d.retry_after_ns,
        WAIT_NS / 2,
        "told how long the wait may last"
    );
    assert_eq!(admit(&e, 0, WAIT_NS), Outcome::FailOpen);

    let closed = engine("{mode: fail_closed}");
    let _rx = closed.take_acquire_queue().unwrap();
    admit(&closed, 0, 0);
    assert_eq!(
        admit(&closed, 0, WAIT_NS),
        Outcome::Denied(DenyReason::Unreachable)
    );
}

#[test]
fn a_full_acquire_queue_refuses_and_asks_again_later() {
    let e = engine_with(
        "{mode: cached_lease}",
        EngineLimits {
            acquire_queue_max: 1,
            ..EngineLimits::default()
        },
    );
    let rx = e.take_acquire_queue().unwrap();
    let other = [Dimension::policy("api", &[("tenant", "globex")])];
    admit(&e, 0, 0);
    let d = e.admit(&AdmitRequest::new(&other), Nanos(0));
    assert_eq!(
        d.results[0].outcome,
        Outcome::Denied(DenyReason::AcquireQueueFull)
    );
    assert_eq!(e.stats().acquire_queue_full, 1);
    assert_eq!(&*rx.try_recv().unwrap().key, "api:tenant=acme");
    e.admit(&AdmitRequest::new(&other), Nanos(1));
    assert_eq!(&*rx.try_recv().unwrap().key, "api:tenant=globex");
}

#[test]
fn a_refused_lease_denies_with_its_own_reason() {
    let e = engine("{mode: cached_lease}");
    let rx = e.take_acquire_queue().unwrap();
    admit(&e, 0, 0);
    rx.try_recv().unwrap().slot.set_state(SlotState::Denied);
    assert_eq!(admit(&e, 0, 1), Outcome::Denied(DenyReason::LeaseRefused));
}
