//! Shaping at leased keys: departures paced at the policy's rate over the credit the agent
//! holds, never over credit not granted; refusals charge neither the credit nor the
//! schedule; the waiting cap; callers that do not wait; rollback of several dimensions;
//! a new version; a lost lease.

mod shape_support;

use leasehold_agent::credit::{CreditSlot, SlotState};
use leasehold_agent::engine::{AdmitRequest, DenyReason, Dimension, Engine, Outcome, RuleSource};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use shape_support::{delay_ms, engine_with, policy, waiting, ACME, MS};
use std::sync::Arc;

/// Far beyond every test's clock.
const DEADLINE_NS: u64 = 1_000_000 * MS;

/// Leased (global scope), 10 per second, shaped up to `max_delay_ms`.
fn leased(id: &str, burst: u64, max_delay_ms: u64, extra: &str) -> Policy {
    policy(&format!(
        "id: {id}\ndimensions: [{{name: tenant, required: true}}]\n\
         rate: {{units: 10, per: 1s}}\nburst: {burst}\nshape: {{max_delay: {max_delay_ms}ms}}\n\
         {extra}"
    ))
}

/// Asks for the key's first lease at time 0 (refused: none is held yet) and returns its
/// slot, live and holding `credit`.
fn lease(e: &Engine, id: &str, credit: u64) -> Arc<CreditSlot> {
    let rx = e.take_acquire_queue().unwrap();
    let dims = [Dimension::policy(id, ACME)];
    assert!(!e.admit(&AdmitRequest::new(&dims), Nanos(0)).allowed);
    let slot = Arc::clone(&rx.try_recv().expect("an acquire was queued").slot);
    slot.deposit(credit, DEADLINE_NS);
    slot.set_state(SlotState::Active);
    slot
}

#[test]
fn held_credit_departs_at_the_policy_rate_within_max_delay() {
    let e = engine_with(vec![leased("api", 1, 250, "")], 16);
    let slot = lease(&e, "api", 10);
    let dims = [Dimension::policy("api", ACME)];
    let delays: Vec<_> = (0..4)
        .map(|_| delay_ms(&e.admit(&waiting(&dims), Nanos(0))))
        .collect();
    assert_eq!(delays, [Some(0), Some(100), Some(200), None]);
    let refused = e.admit(&waiting(&dims), Nanos(0));
    assert_eq!(
        refused.results[0].outcome,
        Outcome::Denied(DenyReason::OverLimit)
    );
    // The next departure is at 300 ms: from 50 ms on it is within 250 ms.
    assert_eq!(refused.retry_after_ns, 50 * MS);
    assert_eq!(
        slot.remaining(),
        7,
        "three spent when decided, refusals none"
    );
    let d = e.admit(&waiting(&dims), Nanos(50 * MS));
    assert_eq!(delay_ms(&d), Some(250));
    assert_eq!(d.departs_at, Nanos(300 * MS));
    assert_eq!(slot.remaining(), 6);
    let stats = e.stats();
    assert_eq!(stats.shaped_admitted, 3);
    assert_eq!(e.shaped_waiting(Nanos(60 * MS)), 3);
    // The slot's counts, which its lease reports as `shaped_units`, hold the delayed units
    // and nothing for those that went at once or were refused (the request before the
    // lease, and the two beyond `max_delay`, count as refused).
    assert_eq!(slot.counts().shaped, 3);
    assert_eq!(slot.counts().refused, 3);
}

#[test]
fn credit_not_held_is_never_scheduled_against() {
    let e = engine_with(vec![leased("api", 1, 1_000, "")], 16);
    let slot = lease(&e, "api", 2);
    let dims = [Dimension::policy("api", ACME)];
    let delays: Vec<_> = (0..3)
        .map(|_| delay_ms(&e.admit(&waiting(&dims), Nanos(0))))
        .collect();
    // The schedule has room at 200 ms, but the lease holds two units.
    assert_eq!(delays, [Some(0), Some(100), None]);
    assert_eq!(e.shaped_waiting(Nanos(0)), 1, "the refusal holds no place");
    // That refusal charged nothing: the next unit granted departs at 200 ms, not later.
    slot.deposit(1, DEADLINE_NS);
    assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), Some(200));
    assert_eq!(slot.remaining(), 0);
}

#[test]
fn a_caller_that_does_not_wait_departs_now_or_is_refused() {
    let e = engine_with(vec![leased("api", 1, 250, "")], 16);
    let slot = lease(&e, "api", 10);
    let dims = [Dimension::policy("api", ACME)];
    let now = AdmitRequest::new(&dims);
    assert_eq!(delay_ms(&e.admit(&now, Nanos(0))), Some(0));
    let refused = e.admit(&now, Nanos(0));
    assert!(
        !refused.allowed,
        "credit is held, but the schedule is full now"
    );
    assert_eq!((refused.delay_ns, refused.retry_after_ns), (0, 100 * MS));
    assert_eq!(slot.remaining(), 9);
    assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), Some(100));
    // That departure at 100 ms holds for callers that do not wait too.
    assert!(!e.admit(&now, Nanos(50 * MS)).allowed);
    assert!(!e.admit(&now, Nanos(100 * MS)).allowed);
    assert!(e.admit(&now, Nanos(200 * MS)).allowed);
    assert_eq!(slot.remaining(), 7);
}

#[test]
fn the_waiting_cap_refuses_charging_nothing() {
    let e = engine_with(vec![leased("api", 1, 250, "")], 1);
    let slot = lease(&e, "api", 10);
    let dims = [Dimension::policy("api", ACME)];
    assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), Some(0));
    assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), Some(100));
    let full = e.admit(&waiting(&dims), Nanos(0));
    assert!(!full.allowed, "one request already waits");
    assert_eq!(
        full.retry_after_ns,
        200 * MS,
        "when its units go without waiting"
    );
    assert_eq!(e.stats().shaped_waiting_full, 1);
    assert_eq!(slot.remaining(), 8);
    // Once the waiting one has departed, the unit refused above is still the next.
    assert_eq!(
        delay_ms(&e.admit(&waiting(&dims), Nanos(100 * MS))),
        Some(100)
    );
}

#[test]
fn a_rolled_back_dimension_gives_back_its_credit_and_its_place() {
    let org = policy(
        "id: org\ndimensions: [{name: tenant, required: true}]\n\
         rate: {units: 1, per: 1h}\nburst: 1\nscope: process\n",
    );
    let e = engine_with(vec![leased("api", 5, 250, ""), org], 16);
    let slot = lease(&e, "api", 10);
    let both = [
        Dimension::policy("api", ACME),
        Dimension::policy("org", ACME),
    ];
    assert!(e.admit(&waiting(&both), Nanos(0)).allowed);
    for _ in 0..3 {
        let refused = e.admit(&waiting(&both), Nanos(0));
        assert_eq!(refused.results[0].outcome, Outcome::RolledBack);
    }
    assert_eq!(slot.remaining(), 9);
    // The schedule got its places back too: four of the burst of five are left now.
    let alone = [Dimension::policy("api", ACME)];
    let now = AdmitRequest::new(&alone);
    let admitted = (0..5).filter(|_| e.admit(&now, Nanos(0)).allowed).count();
    assert_eq!(admitted, 4);
}

#[test]
fn a_new_version_keeps_the_departures_scheduled() {
    let e = engine_with(vec![leased("api", 1, 250, "")], 16);
    let slot = lease(&e, "api", 10);
    let dims = [Dimension::policy("api", ACME)];
    for expected in [Some(0), Some(100), Some(200)] {
        assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), expected);
    }
    e.reload(RuleSource::from_policies(vec![leased("api", 1, 500, "")]))
        .unwrap();
    assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), Some(300));
    assert_eq!(slot.remaining(), 6, "the same lease, spent from");
}

#[test]
fn a_lost_lease_applies_the_failure_behaviour_unshaped() {
    let open = leased("open", 1, 250, "failure: {mode: fail_open}\n");
    let e = engine_with(vec![open], 16);
    let slot = lease(&e, "open", 1);
    let dims = [Dimension::policy("open", ACME)];
    assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), Some(0));
    slot.set_state(SlotState::Unreachable);
    let d = e.admit(&waiting(&dims), Nanos(0));
    assert_eq!((d.allowed, d.delay_ns), (true, 0));
    assert_eq!(d.results[0].outcome, Outcome::FailOpen);

    let closed = leased("closed", 1, 250, "failure: {mode: fail_closed}\n");
    let e = engine_with(vec![closed], 16);
    let slot = lease(&e, "closed", 5);
    let dims = [Dimension::policy("closed", ACME)];
    slot.set_state(SlotState::Unreachable);
    let d = e.admit(&waiting(&dims), Nanos(0));
    assert_eq!(
        d.results[0].outcome,
        Outcome::Denied(DenyReason::Unreachable)
    );
    assert_eq!(
        slot.remaining(),
        5,
        "held credit is not spent once unreachable"
    );
}

#[test]
fn without_shape_a_leased_key_spends_as_before() {
    let p = policy(
        "id: api\ndimensions: [{name: tenant, required: true}]\n\
         rate: {units: 10, per: 1s}\nburst: 1\n",
    );
    let e = engine_with(vec![p], 16);
    let slot = lease(&e, "api", 3);
    let dims = [Dimension::policy("api", ACME)];
    let delays: Vec<_> = (0..4)
        .map(|_| delay_ms(&e.admit(&waiting(&dims), Nanos(0))))
        .collect();
    // Not paced: held credit is spent at once, beyond the burst of one.
    assert_eq!(delays, [Some(0), Some(0), Some(0), None]);
    assert_eq!(slot.remaining(), 0);
}

/// A new window's credit arriving right after the last window's was spent: the schedule
/// spreads it at the policy's rate instead of letting twice the limit go at the boundary.
#[test]
fn a_window_boundary_burst_of_credit_is_spread_at_the_rate() {
    let p = policy(
        "id: win\ndimensions: [{name: tenant, required: true}]\n\
         algorithm: fixed_window\nrate: {units: 40, per: 1s}\nshape: {max_delay: 200ms}\n",
    );
    let e = engine_with(vec![p], 64);
    let slot = lease(&e, "win", 40);
    let dims = [Dimension::policy("win", ACME)];
    let at = |ms| Nanos(ms * MS);
    let spent_at_once = (0..40)
        .filter(|_| e.admit(&waiting(&dims), at(900)).delay_ns == 0)
        .count();
    assert_eq!(spent_at_once, 40, "the whole tolerance at once");
    slot.deposit(40, DEADLINE_NS);
    let delays: Vec<_> = (0..14)
        .map(|_| delay_ms(&e.admit(&waiting(&dims), at(1_000))))
        .collect();
    // 100 ms at 40 per second gave back 4 units; then one every 25 ms up to 200 ms.
    let mut expected = vec![Some(0); 4];
    expected.extend((1..=8).map(|i| Some(25 * i)));
    expected.extend([None, None]);
    assert_eq!(delays, expected);
    assert_eq!(slot.remaining(), 28, "refused units stay held");
}
