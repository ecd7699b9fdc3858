//! Exact policies in the engine and through the gate: keys asked about, the allocator's
//! verdicts enforced with every other dimension all or none, failure behaviours without an
//! answer, and two gates sharing one ledger admitting exactly its limit.

use leasehold_agent::engine::{
    AdmitRequest, DenyReason, Dimension, Engine, ExactVerdict, ExactVerdicts, Outcome, RuleSource,
};
use leasehold_agent::exact::ExactGate;
use leasehold_client::{Grantor, LocalGrantor};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, ManualClock, Nanos};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const TENANT: &[(&str, &str)] = &[("tenant", "acme")];

fn exact(id: &str, failure: &str, extra: &str) -> Policy {
    Policy::from_yaml(&format!(
        "id: {id}\ndimensions: [{{name: tenant}}]\nscope: global\nenforcement: exact\n\
         rate: {{units: 3, per: 1h}}\nburst: 3\nfailure: {{{failure}}}\n{extra}"
    ))
    .unwrap()
}

fn local(id: &str, units: u64) -> Policy {
    Policy::from_yaml(&format!(
        "id: {id}\ndimensions: [{{name: tenant}}]\nscope: process\n\
         rate: {{units: {units}, per: 1h}}\nburst: {units}\n"
    ))
    .unwrap()
}

fn engine(policies: Vec<Policy>) -> Arc<Engine> {
    Arc::new(
        Engine::builder()
            .build(RuleSource::from_policies(policies))
            .unwrap(),
    )
}

#[test]
fn only_exact_dimensions_are_asked_about_with_their_keys() {
    let e = engine(vec![exact("x", "mode: fail_closed", ""), local("l", 5)]);
    let dims = [
        Dimension::policy("l", TENANT),
        Dimension::policy("x", TENANT),
    ];
    let asks = e.exact_asks(&AdmitRequest::new(&dims));
    assert_eq!(asks.len(), 1);
    assert_eq!(
        (
            asks[0].index,
            &*asks[0].policy_id,
            asks[0].key.as_str(),
            asks[0].units
        ),
        (1, "x", "x:tenant=acme", 1)
    );
    let no_exact = engine(vec![local("l", 5)]);
    assert!(no_exact
        .exact_asks(&AdmitRequest::new(&dims[..1]))
        .is_empty());
}

#[test]
fn verdicts_are_enforced_with_the_other_dimensions_all_or_none() {
    let e = engine(vec![exact("x", "mode: fail_closed", ""), local("l", 1)]);
    let dims = [
        Dimension::policy("x", TENANT),
        Dimension::policy("l", TENANT),
    ];
    let req = AdmitRequest::new(&dims);
    let mut admitted = ExactVerdicts::default();
    admitted.set(
        0,
        ExactVerdict::Admitted {
            remaining: 2,
            reset_after_ns: 5,
        },
    );
    let d = e.admit_decided(&req, Nanos(0), &admitted);
    assert!(d.allowed);
    assert_eq!(
        (d.results[0].outcome, d.results[0].remaining),
        (Outcome::Admitted, 2)
    );
    // The local limit is spent: the exact dimension's admission is rolled back.
    let d = e.admit_decided(&req, Nanos(1), &admitted);
    assert!(!d.allowed);
    assert_eq!(d.results[1].outcome, Outcome::Denied(DenyReason::OverLimit));
    let mut refused = ExactVerdicts::default();
    refused.set(
        0,
        ExactVerdict::Denied {
            remaining: 0,
            retry_after_ns: 7_000,
            reset_after_ns: 9_000,
        },
    );
    let d = e.admit_decided(&AdmitRequest::new(&dims[..1]), Nanos(2), &refused);
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ns, 7_000);
    assert_eq!(d.results[0].outcome, Outcome::Denied(DenyReason::OverLimit));
}

#[test]
fn without_a_verdict_the_failure_behaviour_decides() {
    let e = engine(vec![
        exact("closed", "mode: fail_closed", ""),
        exact("cached", "mode: cached_lease", ""),
        exact("open", "mode: fail_open", ""),
        exact(
            "restricted",
            "mode: restricted, min_priority: 5, rate: {units: 1, per: 1h}",
            "",
        ),
        exact("shadow", "mode: fail_closed", "mode: shadow\n"),
    ]);
    let outcome = |id: &str, priority: u8| {
        let dims = [Dimension::policy(id, TENANT)];
        let mut req = AdmitRequest::new(&dims);
        req.priority = priority;
        e.admit(&req, Nanos(0)).results[0].outcome
    };
    let unreachable = Outcome::Denied(DenyReason::Unreachable);
    assert_eq!(outcome("closed", 0), unreachable);
    assert_eq!(
        outcome("cached", 0),
        unreachable,
        "no credit is held to spend"
    );
    assert_eq!(outcome("open", 0), Outcome::FailOpen);
    assert_eq!(outcome("restricted", 9), Outcome::Restricted);
    assert_eq!(
        outcome("restricted", 9),
        Outcome::Denied(DenyReason::Restricted)
    );
    assert_eq!(
        outcome("restricted", 1),
        Outcome::Denied(DenyReason::Restricted)
    );
    assert_eq!(
        outcome("shadow", 0),
        Outcome::ShadowDenied(DenyReason::Unreachable)
    );
}

fn shared_ledger(policies: &[Policy], clock: Arc<ManualClock>) -> Arc<LocalGrantor> {
    let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let g = LocalGrantor::new(Ledger::new(LedgerConfig::root("g")), signer, clock);
    g.install(policies).unwrap();
    Arc::new(g)
}

#[tokio::test]
async fn two_gates_on_one_ledger_admit_exactly_its_limit_and_refund_refusals() {
    let policies = vec![exact("x", "mode: fail_closed", ""), local("l", 1)];
    let clock = Arc::new(ManualClock::new(Nanos(1_000_000_000)));
    let ledger = shared_ledger(&policies, Arc::clone(&clock));
    let gate = |holder: &str| {
        let grantor: Arc<dyn Grantor> = ledger.clone();
        ExactGate::new(engine(policies.clone())).with_grantor(grantor, holder, 1_000)
    };
    let (a, b) = (gate("a"), gate("b"));
    let now = || clock.now();

    // Beta: the second request spending both policies is refused by the local limit, and
    // the exact unit is given back.
    let beta = &[("tenant", "beta")][..];
    let both = [Dimension::policy("x", beta), Dimension::policy("l", beta)];
    assert!(a.admit(&AdmitRequest::new(&both), now).await.allowed);
    assert!(!a.admit(&AdmitRequest::new(&both), now).await.allowed);
    for _ in 0..100 {
        if a.counters().refunds_sent.load(Ordering::Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(a.counters().refunds_sent.load(Ordering::Relaxed), 1);
    let used = ledger.with_ledger(|l| l.account("x:tenant=beta").unwrap().stats.used);
    assert_eq!(used, 1);

    let dims = [Dimension::policy("x", TENANT)];
    let mut together = 0;
    for _ in 0..5 {
        together += u32::from(a.admit(&AdmitRequest::new(&dims), now).await.allowed);
        together += u32::from(b.admit(&AdmitRequest::new(&dims), now).await.allowed);
    }
    assert_eq!(together, 3, "the burst, exactly");
    let refused = b.admit(&AdmitRequest::new(&dims), now).await;
    assert_eq!(refused.denial.unwrap().reason, DenyReason::OverLimit);
    // b had the second unit; its four other tries and this one were refused.
    assert_eq!(b.counters().refused.load(Ordering::Relaxed), 5);
    // An hour's refill brings back the rate's units.
    clock.advance_ns(3_600 * 1_000_000_000);
    assert!(a.admit(&AdmitRequest::new(&dims), now).await.allowed);
}

#[tokio::test]
async fn a_gate_without_an_allocator_leaves_exact_dimensions_to_their_failure_behaviour() {
    let gate = ExactGate::new(engine(vec![exact("x", "mode: fail_open", "")]));
    let dims = [Dimension::policy("x", TENANT)];
    let d = gate.admit(&AdmitRequest::new(&dims), || Nanos(0)).await;
    assert_eq!(d.results[0].outcome, Outcome::FailOpen);
    assert_eq!(gate.counters().unanswered.load(Ordering::Relaxed), 1);
}
