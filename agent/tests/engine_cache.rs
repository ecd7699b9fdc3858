//! What a thread remembers between decisions (the rule set and recently used leased keys)
//! never outlives the state it stands for: a swept key, a new policy version, another
//! engine.

use leasehold_agent::credit::SlotState;
use leasehold_agent::engine::{
    AcquireReceiver, AcquireRequest, AdmitRequest, DenyReason, Dimension, Engine, EngineLimits,
    Outcome, RuleSource,
};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;

const IDLE_NS: u64 = 1_000_000_000;

fn policy(burst: u64) -> Policy {
    Policy::from_yaml(&format!(
        "id: api\ndimensions: [{{name: user, required: true}}]\n\
         rate: {{units: 1, per: 1h}}\nburst: {burst}\n"
    ))
    .unwrap()
}

fn engine() -> (Engine, AcquireReceiver) {
    let e = Engine::builder()
        .limits(EngineLimits {
            key_idle_ns: IDLE_NS,
            ..EngineLimits::default()
        })
        .build(RuleSource::from_policies([policy(10)]))
        .unwrap();
    let rx = e.take_acquire_queue().unwrap();
    (e, rx)
}

const DIMS: [Dimension<'static>; 1] = [Dimension {
    target: leasehold_agent::engine::Target::Policy("api"),
    entries: &[("user", "alice")],
}];

fn admit(e: &Engine, now: u64) -> Outcome {
    e.admit(&AdmitRequest::new(&DIMS), Nanos(now)).results[0].outcome
}

/// Asks for the key's lease and grants `credit` to the slot it was asked for.
fn lease(e: &Engine, rx: &AcquireReceiver, now: u64, credit: u64) -> AcquireRequest {
    assert_eq!(admit(e, now), Outcome::Denied(DenyReason::AwaitingLease));
    let req = rx.try_recv().expect("one acquire for the key");
    req.slot.deposit(credit, u64::MAX);
    req.slot.set_state(SlotState::Active);
    req
}

#[test]
fn a_swept_key_is_not_spent_from_the_cache_and_its_slot_is_detached() {
    let (e, rx) = engine();
    let first = lease(&e, &rx, 0, 5);
    assert_eq!(admit(&e, 1), Outcome::Admitted, "spent from the lease");
    assert_eq!(first.slot.remaining(), 4);

    assert_eq!(e.sweep(Nanos(2 * IDLE_NS)), 1, "the idle key is dropped");
    assert!(
        first.slot.is_detached(),
        "the lease manager is told to hand it back"
    );

    // This thread cached the entry; it must not spend the old slot again.
    let second = lease(&e, &rx, 2 * IDLE_NS + 1, 3);
    assert!(
        !std::sync::Arc::ptr_eq(&first.slot, &second.slot),
        "a new slot"
    );
    assert_eq!(admit(&e, 2 * IDLE_NS + 2), Outcome::Admitted);
    assert_eq!(first.slot.remaining(), 4, "the old slot is left alone");
    assert_eq!(second.slot.remaining(), 2);
    assert!(!second.slot.is_detached());
}

#[test]
fn a_new_policy_version_applies_to_the_next_decision_on_the_same_thread() {
    let (e, rx) = engine();
    let req = lease(&e, &rx, 0, 100);
    assert_eq!(admit(&e, 1), Outcome::Admitted);
    let before = e.admit(&AdmitRequest::new(&DIMS), Nanos(2));
    assert_eq!(before.results[0].limit, 10);

    e.reload(RuleSource::from_policies([policy(20)])).unwrap();
    let after = e.admit(&AdmitRequest::new(&DIMS), Nanos(3));
    assert_eq!(after.results[0].limit, 20, "the new version's capacity");
    assert!(after.allowed, "the key keeps its slot across versions");
    assert_eq!(req.slot.remaining(), 97);

    e.remove_policy("api").unwrap();
    let gone = e.admit(&AdmitRequest::new(&DIMS), Nanos(4));
    assert_eq!(
        gone.results[0].outcome,
        Outcome::Denied(DenyReason::UnknownPolicy)
    );
}

#[test]
fn engines_on_one_thread_keep_their_own_keys() {
    let (a, rx_a) = engine();
    let (b, rx_b) = engine();
    let slot_a = lease(&a, &rx_a, 0, 2).slot;
    assert_eq!(admit(&a, 1), Outcome::Admitted);
    // Same policy id and key, other engine: its own first lease, not `a`'s slot.
    let slot_b = lease(&b, &rx_b, 2, 7).slot;
    assert_eq!(admit(&b, 3), Outcome::Admitted);
    assert_eq!(admit(&a, 4), Outcome::Admitted);
    assert_eq!(admit(&a, 5), Outcome::Denied(DenyReason::OverLimit));
    assert_eq!(slot_a.remaining(), 0);
    assert_eq!(slot_b.remaining(), 6);
}

#[test]
fn another_thread_that_cached_the_key_sees_it_swept() {
    let (e, rx) = engine();
    let first = lease(&e, &rx, 0, 50);
    let swept = std::sync::Barrier::new(2);
    let cached = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(admit(&e, 1), Outcome::Admitted, "cached on this thread");
            cached.wait();
            swept.wait();
            assert_eq!(
                admit(&e, 2 * IDLE_NS + 1),
                Outcome::Denied(DenyReason::AwaitingLease),
                "asks for a new lease instead of spending the dropped one"
            );
        });
        cached.wait();
        assert_eq!(e.sweep(Nanos(2 * IDLE_NS)), 1);
        swept.wait();
    });
    assert_eq!(first.slot.remaining(), 49);
    assert!(rx.try_recv().is_ok(), "a new acquire was queued");
}

#[test]
fn a_swept_local_key_starts_afresh_on_the_thread_that_cached_it() {
    let local = Policy::from_yaml(
        "id: api\ndimensions: [{name: user, required: true}]\n\
         rate: {units: 1, per: 1h}\nburst: 2\nscope: process\n",
    )
    .unwrap();
    let e = Engine::builder()
        .limits(EngineLimits {
            key_idle_ns: IDLE_NS,
            ..EngineLimits::default()
        })
        .build(RuleSource::from_policies([local]))
        .unwrap();
    assert_eq!(admit(&e, 0), Outcome::Admitted);
    assert_eq!(admit(&e, 1), Outcome::Admitted);
    assert_eq!(admit(&e, 2), Outcome::Denied(DenyReason::OverLimit));
    assert_eq!(e.sweep(Nanos(2 * IDLE_NS)), 0, "a drained bucket is kept");
    // One unit per hour, burst 2: whole again two hours after it was drained.
    const WHOLE_NS: u64 = 2 * 3_600_000_000_000 + 10;
    assert_eq!(e.sweep(Nanos(WHOLE_NS)), 1);
    // The thread's cached entry was dropped: a new limiter, with its whole burst.
    assert_eq!(admit(&e, WHOLE_NS + 1), Outcome::Admitted);
    assert_eq!(admit(&e, WHOLE_NS + 2), Outcome::Admitted);
    assert_eq!(e.key_count(), 1);
}
