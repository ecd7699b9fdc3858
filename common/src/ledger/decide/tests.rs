use super::*;
use crate::ledger::{
    Acquire, Command, LeaseParams, LedgerConfig, Level, Outcome, PolicyParams, WindowSpec,
};
use crate::rate::Rate;

const SEC: u64 = 1_000_000_000;

fn exact(id: &str, window: Option<WindowSpec>) -> PolicyParams {
    PolicyParams {
        policy_id: id.into(),
        version: 1,
        rate: Rate::per_second(10).unwrap(),
        burst: 10,
        lease: LeaseParams {
            ttl_ms: 10_000,
            min_credit: 1,
            max_credit: 10,
            reserve_ppm: 0,
            reserve_priority_min: 8,
            refresh_horizon_ms: 1_000,
        },
        weights: Default::default(),
        window,
        owner: Level::Global,
        exact: true,
    }
}

fn ledger(policies: &[PolicyParams]) -> Ledger {
    let mut l = Ledger::new(LedgerConfig::root("g"));
    for p in policies {
        l.apply(Nanos(0), Command::PutPolicy(p.clone())).unwrap();
    }
    l
}

fn item(policy: &str, key: &str, units: u64) -> DecideItem {
    DecideItem {
        policy_id: policy.into(),
        key: key.into(),
        units,
    }
}

fn decide(l: &mut Ledger, at: u64, items: Vec<DecideItem>) -> Decided {
    match l
        .apply(Nanos(at), Command::Decide(Decide { items }))
        .unwrap()
    {
        Outcome::Decided(d) => *d,
        other => panic!("expected a decision, got {other:?}"),
    }
}

#[test]
fn a_bucket_admits_its_burst_then_refuses_until_it_refills() {
    let mut l = ledger(&[exact("p", None)]);
    let admitted = (0..15)
        .filter(|_| decide(&mut l, SEC, vec![item("p", "p:k", 1)]).admitted)
        .count();
    assert_eq!(admitted, 10);
    let refused = decide(&mut l, SEC, vec![item("p", "p:k", 1)]);
    assert_eq!(refused.verdicts[0].retry_after_ns, SEC / 10);
    assert!(decide(&mut l, SEC + SEC / 10, vec![item("p", "p:k", 1)]).admitted);
    assert!(l.conserved());
}

#[test]
fn a_decision_is_all_or_nothing() {
    let mut l = ledger(&[exact("a", None), exact("b", None)]);
    assert!(decide(&mut l, 0, vec![item("b", "b:k", 8)]).admitted);
    let d = decide(&mut l, 0, vec![item("a", "a:k", 5), item("b", "b:k", 5)]);
    assert!(!d.admitted);
    assert!(d.verdicts[0].fits && !d.verdicts[1].fits);
    assert_eq!(d.verdicts[0].remaining, 10, "nothing was charged to a");
    assert_eq!(d.verdicts[1].remaining, 2);
    assert!(decide(&mut l, 0, vec![item("a", "a:k", 10)]).admitted);
    assert!(l.conserved());
}

#[test]
fn a_fixed_window_admits_its_limit_to_its_end_and_refunds_only_within_it() {
    let spec = WindowSpec::Fixed {
        window_ns: 60 * SEC,
        limit: 3,
    };
    let mut l = ledger(&[exact("w", Some(spec))]);
    // The last instant of the window: a lease would not be granted here, a decision is.
    let late = 120 * SEC - 1;
    let first = decide(&mut l, late - 10, vec![item("w", "w:k", 3)]);
    assert!(first.admitted);
    assert!(!decide(&mut l, late, vec![item("w", "w:k", 1)]).admitted);
    let refund = Refund {
        items: vec![item("w", "w:k", 2)],
        decided_at: first.at,
    };
    assert_eq!(
        l.apply(Nanos(late), Command::Refund(refund.clone()))
            .unwrap(),
        Outcome::Refunded { units: 2 }
    );
    // A refund cannot give back more than the key ever spent, nor into a later window.
    assert_eq!(
        l.apply(Nanos(late), Command::Refund(refund.clone()))
            .unwrap(),
        Outcome::Refunded { units: 1 }
    );
    let next = decide(&mut l, 120 * SEC, vec![item("w", "w:k", 3)]);
    assert!(next.admitted, "a new window opens whole");
    assert_eq!(
        l.apply(Nanos(121 * SEC), Command::Refund(refund)).unwrap(),
        Outcome::Refunded { units: 0 }
    );
    assert!(l.conserved());
}

#[test]
fn leases_and_decisions_do_not_mix() {
    let mut l = ledger(&[exact("x", None)]);
    let acquire = Command::Acquire(Acquire {
        holder_id: "h".into(),
        policy_id: "x".into(),
        key: "x:k".into(),
        want_credit: 1,
        demand_milli_per_sec: 0,
        request_id: 1,
        priority: 0,
    });
    assert_eq!(
        l.apply(Nanos(0), acquire),
        Err(LedgerError::ExactPolicy("x".into()))
    );
    let mut leased = exact("y", None);
    leased.exact = false;
    l.apply(Nanos(0), Command::PutPolicy(leased)).unwrap();
    let asked = Command::Decide(Decide {
        items: vec![item("y", "y:k", 1)],
    });
    assert_eq!(
        l.apply(Nanos(0), asked),
        Err(LedgerError::NotExact("y".into()))
    );
    let none = Command::Decide(Decide { items: vec![] });
    assert!(matches!(
        l.apply(Nanos(0), none),
        Err(LedgerError::DecideItems { count: 0, .. })
    ));
}

#[test]
fn a_delegated_ledger_does_not_decide_what_it_does_not_own() {
    let mut config = LedgerConfig::delegated("eu");
    config.level = Level::Region;
    let mut l = Ledger::new(config);
    l.apply(Nanos(0), Command::PutPolicy(exact("g", None)))
        .unwrap();
    let asked = Command::Decide(Decide {
        items: vec![item("g", "g:k", 1)],
    });
    assert!(matches!(
        l.apply(Nanos(0), asked),
        Err(LedgerError::NotOwner { .. })
    ));
}
