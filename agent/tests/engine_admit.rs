//! Admission through the engine: limits, all-or-nothing dimensions, shadow mode, kill
//! switch, emergencies, self-protection, concurrency and hot reload.

use leasehold_agent::credit::SlotState;
use leasehold_agent::engine::{
    AcquireReceiver, AdmitRequest, DenyReason, Dimension, Emergency, Engine, Outcome, RuleSource,
    SelfProtection,
};
use leasehold_common::policy::Policy;
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;

const SEC: u64 = 1_000_000_000;

fn policy(yaml: &str) -> Policy {
    Policy::from_yaml(yaml).expect("test policy is valid")
}

fn local_bucket(id: &str, units: u64, burst: u64) -> Policy {
    policy(&format!(
        "id: {id}\ndimensions: [{{name: tenant, required: true}}]\n\
         rate: {{units: {units}, per: 1s}}\nburst: {burst}\nscope: process\n"
    ))
}

fn leased(id: &str, burst: u64) -> Policy {
    policy(&format!(
        "id: {id}\ndimensions: [{{name: tenant, required: true}}]\n\
         rate: {{units: 10, per: 1s}}\nburst: {burst}\n"
    ))
}

fn engine(policies: Vec<Policy>) -> Engine {
    Engine::builder()
        .build(RuleSource::from_policies(policies))
        .unwrap()
}

/// Acts as the lease manager: grants `credit` to every queued key until `deadline`.
fn grant_all(rx: &AcquireReceiver, credit: u64, deadline: u64) -> usize {
    let mut n = 0;
    while let Ok(req) = rx.try_recv() {
        req.slot.deposit(credit, deadline);
        req.slot.set_state(SlotState::Active);
        n += 1;
    }
    n
}

fn one<'a>(dims: &'a [Dimension<'a>]) -> AdmitRequest<'a> {
    AdmitRequest::new(dims)
}

#[test]
fn local_limit_admits_burst_then_denies() {
    let e = engine(vec![local_bucket("api", 1, 3)]);
    let dims = [Dimension::policy("api", &[("tenant", "acme")])];
    for i in 0..3 {
        let d = e.admit(&one(&dims), Nanos(0));
        assert!(d.allowed, "request {i}");
        assert_eq!(d.results[0].remaining, 2 - i);
        assert_eq!(d.results[0].limit, 3);
    }
    let d = e.admit(&one(&dims), Nanos(0));
    assert!(!d.allowed);
    assert_eq!(d.results[0].outcome, Outcome::Denied(DenyReason::OverLimit));
    assert_eq!(d.retry_after_ns, SEC);
    let other = [Dimension::policy("api", &[("tenant", "globex")])];
    assert!(
        e.admit(&one(&other), Nanos(0)).allowed,
        "keys are independent"
    );
    assert!(e.admit(&one(&dims), Nanos(SEC)).allowed, "refilled");
    let c = e.stats().policies[0].counters;
    assert_eq!((c.offered, c.admitted, c.rejected), (6, 5, 1));
}

#[test]
fn leased_key_asks_once_then_spends_its_credit() {
    let e = engine(vec![leased("api", 100)]);
    let rx = e.take_acquire_queue().unwrap();
    assert!(e.take_acquire_queue().is_none(), "given out once");
    let dims = [Dimension::policy("api", &[("tenant", "acme")])];
    for _ in 0..3 {
        let d = e.admit(&one(&dims), Nanos(1));
        assert_eq!(
            d.results[0].outcome,
            Outcome::Denied(DenyReason::AwaitingLease)
        );
    }
    let req = rx.try_recv().unwrap();
    assert_eq!(&*req.key, "api:tenant=acme");
    assert_eq!(&*req.policy_id, "api");
    assert!(rx.try_recv().is_err(), "one acquire per key");
    req.slot.deposit(5, 10 * SEC);
    req.slot.set_state(SlotState::Active);
    for i in 0..5 {
        let d = e.admit(&one(&dims), Nanos(2));
        assert!(d.allowed);
        assert_eq!(d.results[0].remaining, 4 - i);
    }
    let d = e.admit(&one(&dims), Nanos(2));
    assert_eq!(d.results[0].outcome, Outcome::Denied(DenyReason::OverLimit));
    assert_eq!(req.slot.offered(), 9, "demand signal counts every offer");
}

#[test]
fn cost_comes_from_the_policy_times_hits() {
    let p = policy(
        "id: api\ndimensions: [{name: tenant}]\ncost: {unit: weighted, default: 2, routes: {/search: 5}}\n\
         rate: {units: 1, per: 1h}\nburst: 20\nscope: process\n",
    );
    let e = engine(vec![p]);
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    let req = AdmitRequest {
        route: Some("/search"),
        hits: 3,
        ..one(&dims)
    };
    assert_eq!(e.admit(&req, Nanos(0)).results[0].remaining, 5);
    let req = AdmitRequest {
        route: Some("/other"),
        hits: 0,
        ..one(&dims)
    };
    let check = e.admit(&req, Nanos(0));
    assert!(check.allowed);
    assert_eq!(
        check.results[0].remaining, 5,
        "0 hits check without charging"
    );
    let req = AdmitRequest { hits: 1, ..req };
    assert_eq!(e.admit(&req, Nanos(0)).results[0].remaining, 3);
    let req = AdmitRequest {
        route: Some("/search"),
        hits: 5,
        ..one(&dims)
    };
    let d = e.admit(&req, Nanos(0));
    assert_eq!(
        d.results[0].outcome,
        Outcome::Denied(DenyReason::CostAboveCapacity)
    );
    assert_eq!(d.retry_after_ns, u64::MAX);
}

#[test]
fn a_failing_dimension_charges_no_other() {
    let e = engine(vec![
        leased("global", 100),
        local_bucket("tenant", 1, 5),
        local_bucket("route", 1, 1),
    ]);
    let rx = e.take_acquire_queue().unwrap();
    let dims = [
        Dimension::policy("global", &[("tenant", "all")]),
        Dimension::policy("tenant", &[("tenant", "acme")]),
        Dimension::policy("route", &[("tenant", "acme")]),
    ];
    e.admit(&one(&dims), Nanos(0));
    assert_eq!(grant_all(&rx, 10, 10 * SEC), 1);
    let d = e.admit(&one(&dims), Nanos(1));
    assert!(d.allowed);
    let slot_left = d.results[0].remaining;
    let tenant_left = d.results[1].remaining;
    assert_eq!(
        (slot_left, tenant_left),
        (9, 4),
        "the first call, refused while awaiting the lease, charged nothing"
    );

    let d = e.admit(&one(&dims), Nanos(1));
    assert!(!d.allowed);
    assert_eq!(d.denial.unwrap().dimension, Some(2));
    let outcomes: Vec<_> = d.results.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::RolledBack,
            Outcome::RolledBack,
            Outcome::Denied(DenyReason::OverLimit)
        ]
    );
    // Nothing was kept: the next single-dimension requests see the old balances.
    let g = e.admit(&one(&dims[..1]), Nanos(1));
    assert_eq!(g.results[0].remaining, slot_left - 1);
    let t = e.admit(&one(&dims[1..2]), Nanos(1));
    assert_eq!(t.results[0].remaining, tenant_left - 1);

    let stats = e.stats();
    let tenant = stats
        .policies
        .iter()
        .find(|p| p.policy_id == "tenant")
        .unwrap();
    assert_eq!(tenant.counters.rolled_back, 1);
}

#[test]
fn a_refusal_skips_later_dimensions() {
    let e = engine(vec![local_bucket("a", 1, 1), local_bucket("b", 1, 1)]);
    let dims = [
        Dimension::policy("a", &[("tenant", "x")]),
        Dimension::policy("b", &[("tenant", "x")]),
    ];
    assert!(e.admit(&one(&dims[..1]), Nanos(0)).allowed);
    let d = e.admit(&one(&dims), Nanos(0));
    assert_eq!(d.results[1].outcome, Outcome::Skipped);
    assert!(
        e.admit(&one(&dims[1..]), Nanos(0)).allowed,
        "b was not charged"
    );
}

#[test]
fn shadow_mode_counts_would_deny_but_admits() {
    let mut p = local_bucket("api", 1, 2);
    p.mode = leasehold_common::policy::Mode::Shadow;
    let e = engine(vec![p]);
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    for _ in 0..5 {
        assert!(e.admit(&one(&dims), Nanos(0)).allowed);
    }
    let d = e.admit(&one(&dims), Nanos(0));
    assert_eq!(
        d.results[0].outcome,
        Outcome::ShadowDenied(DenyReason::OverLimit)
    );
    let missing = e.admit(&one(&[Dimension::policy("api", &[])]), Nanos(0));
    assert!(missing.allowed);
    assert_eq!(
        missing.results[0].outcome,
        Outcome::ShadowDenied(DenyReason::InvalidKey)
    );
    let c = e.stats().policies[0].counters;
    assert_eq!((c.admitted, c.shadow_denied, c.rejected), (2, 5, 0));
}

#[test]
fn kill_switch_admits_everything_counted_apart() {
    let mut p = local_bucket("api", 1, 1);
    p.kill_switch = true;
    let e = engine(vec![p]);
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    for _ in 0..10 {
        let d = e.admit(&one(&dims), Nanos(0));
        assert_eq!(d.results[0].outcome, Outcome::KillSwitch);
        assert!(d.allowed);
    }
    let c = e.stats().policies[0].counters;
    assert_eq!((c.kill_switch, c.admitted), (10, 0));
}

#[test]
fn emergency_restricted_and_fail_open_override_the_policy() {
    let e = engine(vec![local_bucket("api", 1, 1)]);
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    let rate = Rate::per_second(2).unwrap();
    e.set_emergency(
        "api",
        Emergency::Restricted {
            min_priority: 5,
            rate,
        },
    )
    .unwrap();
    let low = AdmitRequest {
        priority: 4,
        ..one(&dims)
    };
    let high = AdmitRequest {
        priority: 5,
        ..one(&dims)
    };
    let d = e.admit(&low, Nanos(0));
    assert_eq!(
        d.results[0].outcome,
        Outcome::Denied(DenyReason::Restricted)
    );
    assert_eq!(
        e.admit(&high, Nanos(0)).results[0].outcome,
        Outcome::Restricted
    );
    assert_eq!(
        e.admit(&high, Nanos(0)).results[0].outcome,
        Outcome::Restricted
    );
    let d = e.admit(&high, Nanos(0));
    assert_eq!(
        d.results[0].outcome,
        Outcome::Denied(DenyReason::Restricted)
    );
    assert_eq!(d.retry_after_ns, SEC / 2, "emergency rate 2/s");

    e.set_emergency("api", Emergency::FailOpen).unwrap();
    for _ in 0..5 {
        assert_eq!(
            e.admit(&low, Nanos(0)).results[0].outcome,
            Outcome::FailOpen
        );
    }
    e.set_emergency("api", Emergency::Normal).unwrap();
    assert!(
        e.admit(&low, Nanos(0)).allowed,
        "own bucket untouched so far"
    );
    assert!(!e.admit(&low, Nanos(0)).allowed);
    let c = e.stats().policies[0].counters;
    assert_eq!((c.restricted, c.fail_open, c.admitted), (2, 5, 1));
    assert!(e.set_emergency("nope", Emergency::Normal).is_err());
}

#[test]
fn self_protection_refuses_before_any_policy() {
    let e = Engine::builder()
        .self_protection(SelfProtection {
            rate: Rate::per_second(1).unwrap(),
            burst: 2,
        })
        .build(RuleSource::from_policies([local_bucket("api", 100, 100)]))
        .unwrap();
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    assert!(e.admit(&one(&dims), Nanos(0)).allowed);
    assert!(e.admit(&one(&dims), Nanos(0)).allowed);
    let d = e.admit(&one(&dims), Nanos(0));
    assert!(!d.allowed);
    assert_eq!(d.denial.unwrap().reason, DenyReason::SelfProtection);
    assert_eq!(d.denial.unwrap().dimension, None);
    assert_eq!(d.retry_after_ns, SEC);
    assert!(e.admit(&one(&dims), Nanos(SEC)).allowed);
    assert_eq!(e.stats().self_protection_denied, 1);
    assert_eq!(
        e.stats().policies[0].counters.offered,
        3,
        "refused before counting"
    );
}

#[test]
fn concurrency_limit_holds_units_until_released() {
    let p = policy(
        "id: conc\ndimensions: [{name: tenant}]\nalgorithm: concurrency\nconcurrency: {max_in_flight: 2}\nscope: process\n",
    );
    let e = engine(vec![p]);
    let dims = [Dimension::policy("conc", &[("tenant", "a")])];
    let first = e.admit(&one(&dims), Nanos(0));
    let mut second = e.admit(&one(&dims), Nanos(0));
    assert!(first.allowed && second.allowed);
    assert!(!second.in_flight.is_empty());
    let third = e.admit(&one(&dims), Nanos(0));
    assert!(!third.allowed);
    assert!(third.in_flight.is_empty(), "a refusal holds nothing");
    second.in_flight.release();
    let fourth = e.admit(&one(&dims), Nanos(0));
    assert!(fourth.allowed);
    drop(first);
    drop(fourth);
    let a = e.admit(&one(&dims), Nanos(0));
    let b = e.admit(&one(&dims), Nanos(0));
    assert!(a.allowed && b.allowed, "dropping a decision releases");
}

#[test]
fn concurrency_units_roll_back_when_another_dimension_refuses() {
    let p = policy(
        "id: conc\ndimensions: [{name: tenant}]\nalgorithm: concurrency\nconcurrency: {max_in_flight: 1}\nscope: process\n",
    );
    let e = engine(vec![p, local_bucket("rate", 1, 1)]);
    let dims = [
        Dimension::policy("conc", &[("tenant", "a")]),
        Dimension::policy("rate", &[("tenant", "a")]),
    ];
    assert!(e.admit(&one(&dims[1..]), Nanos(0)).allowed);
    let d = e.admit(&one(&dims), Nanos(0));
    assert!(!d.allowed);
    let held = e.admit(&one(&dims[..1]), Nanos(0));
    assert!(
        held.allowed,
        "the refused request holds no concurrency unit"
    );
}

#[test]
fn unknown_policy_and_too_many_dimensions() {
    let e = engine(vec![local_bucket("api", 1, 1)]);
    let d = e.admit(&one(&[Dimension::policy("nope", &[])]), Nanos(0));
    assert!(!d.allowed, "unknown policy ids are refused by default");
    assert_eq!(d.denial.unwrap().reason, DenyReason::UnknownPolicy);
    let many = [Dimension::policy("api", &[("tenant", "a")]); 9];
    let d = e.admit(&one(&many), Nanos(0));
    assert_eq!(d.denial.unwrap().reason, DenyReason::TooManyDimensions);
    let s = e.stats();
    assert_eq!((s.unknown_policy, s.too_many_dimensions), (1, 1));
}

#[test]
fn decision_ids_are_unique_and_carry_the_instance() {
    let e = Engine::builder()
        .instance_id(7)
        .build(RuleSource::default())
        .unwrap();
    let a = e.admit(&one(&[]), Nanos(0)).decision_id;
    let b = e.admit(&one(&[]), Nanos(0)).decision_id;
    assert_ne!(a, b);
    assert_eq!(a >> 40, 7);
}

#[test]
fn reload_keeps_state_of_unchanged_policies_only() {
    let e = engine(vec![local_bucket("a", 1, 2), local_bucket("b", 1, 2)]);
    let da = [Dimension::policy("a", &[("tenant", "x")])];
    let db = [Dimension::policy("b", &[("tenant", "x")])];
    assert!(e.admit(&one(&da), Nanos(0)).allowed);
    assert!(e.admit(&one(&db), Nanos(0)).allowed);
    e.set_emergency("b", Emergency::FailOpen).unwrap();
    e.reload(RuleSource::from_policies([
        local_bucket("a", 1, 2),
        local_bucket("b", 1, 3),
    ]))
    .unwrap();
    assert_eq!(
        e.admit(&one(&da), Nanos(0)).results[0].remaining,
        0,
        "a kept state"
    );
    assert_eq!(
        e.admit(&one(&db), Nanos(0)).results[0].outcome,
        Outcome::FailOpen
    );
    e.set_emergency("b", Emergency::Normal).unwrap();
    assert_eq!(
        e.admit(&one(&db), Nanos(0)).results[0].remaining,
        2,
        "b starts anew"
    );
    let b = e
        .stats()
        .policies
        .into_iter()
        .find(|p| p.policy_id == "b")
        .unwrap();
    assert_eq!(b.counters.offered, 3, "counters survive a reload");
    assert_eq!(e.key_count(), 2, "b's state was replaced in place");
    e.reload(RuleSource::from_policies([local_bucket("b", 1, 3)]))
        .unwrap();
    assert_eq!(e.sweep(Nanos(0)), 1, "a's state goes with a");
    assert_eq!(e.key_count(), 1);
}

#[test]
fn clock_steps_back_are_clamped_and_counted() {
    let e = engine(vec![local_bucket("api", 1, 1)]);
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    assert!(e.admit(&one(&dims), Nanos(5 * SEC)).allowed);
    assert!(
        !e.admit(&one(&dims), Nanos(SEC)).allowed,
        "no credit minted"
    );
    assert_eq!(e.stats().clock.rollbacks, 1);
}
