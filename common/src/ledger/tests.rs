//! Examples of each ledger command; the randomised promises live in `tests/ledger_*.rs`.

use super::*;
use crate::rate::Rate;

const SEC: u64 = 1_000_000_000;

fn params(version: u64) -> PolicyParams {
    PolicyParams {
        weights: Default::default(),
        window: None,
        owner: Default::default(),
        exact: false,
        policy_id: "p".into(),
        version,
        rate: Rate::per_second(100).unwrap(),
        burst: 1_000,
        lease: LeaseParams {
            ttl_ms: 10_000,
            min_credit: 1,
            max_credit: 500,
            reserve_ppm: 100_000,
            reserve_priority_min: 8,
            refresh_horizon_ms: 2_000,
        },
    }
}

fn root() -> Ledger {
    let mut l = Ledger::new(LedgerConfig::root("g"));
    l.apply(Nanos(0), Command::PutPolicy(params(1))).unwrap();
    l
}

fn acquire(holder: &str, want: u64, request_id: u64) -> Command {
    Command::Acquire(Acquire {
        holder_id: holder.into(),
        policy_id: "p".into(),
        key: "k".into(),
        want_credit: want,
        demand_milli_per_sec: 0,
        request_id,
        priority: 0,
    })
}

/// The first version of upstream lease `id` on key "k", as a region records it.
fn upstream_granted(id: u64, credit: u64, deadline_ns: u64) -> Command {
    Command::UpstreamGranted(UpstreamLease {
        policy_id: "p".into(),
        key: "k".into(),
        upstream_lease_id: id,
        credit,
        deadline: Nanos(deadline_ns),
        generation: 1,
    })
}

fn granted(o: Outcome) -> Grant {
    match o {
        Outcome::Granted(g) => *g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn grant_is_capped_by_max_credit_and_retry_replays() {
    let mut l = root();
    let g = granted(l.apply(Nanos(0), acquire("a", 800, 1)).unwrap());
    assert_eq!(g.lease.credit, 500);
    let again = granted(l.apply(Nanos(5), acquire("a", 800, 1)).unwrap());
    assert_eq!(again, g, "a retried acquire must not grant twice");
    assert_eq!(l.account("k").unwrap().outstanding, 500);
    assert!(matches!(
        l.apply(Nanos(6), acquire("a", 1, 0)),
        Err(LedgerError::StaleRequest { .. })
    ));
}

#[test]
fn a_release_supersedes_the_kept_grant_and_older_requests_stay_stale() {
    let mut l = root();
    let lease = granted(l.apply(Nanos(0), acquire("a", 300, 1)).unwrap()).lease;
    let rel = Command::Release(Release {
        holder_id: "a".into(),
        lease_id: lease.lease_id,
        final_used: 0,
        request_id: 2,
    });
    l.apply(Nanos(SEC), rel).unwrap();
    let slot = l.account("k").unwrap().holders.get("a").unwrap();
    assert_eq!(slot.last_request_id, 2);
    assert!(
        matches!(slot.last_outcome, Some(Outcome::Released { .. })),
        "the grant is no longer kept: {:?}",
        slot.last_outcome
    );
    assert!(matches!(
        l.apply(Nanos(SEC), acquire("a", 300, 1)),
        Err(LedgerError::StaleRequest {
            request_id: 1,
            last: 2
        })
    ));
    let again = granted(l.apply(Nanos(SEC), acquire("a", 300, 3)).unwrap());
    assert_ne!(again.lease.lease_id, lease.lease_id);
    assert_eq!(
        granted(l.apply(Nanos(SEC), acquire("a", 300, 3)).unwrap()),
        again,
        "the new acquire replays"
    );
}

#[test]
fn reserve_is_kept_for_high_priority() {
    let mut l = root();
    granted(l.apply(Nanos(0), acquire("a", 500, 1)).unwrap());
    let g = granted(l.apply(Nanos(0), acquire("b", 500, 1)).unwrap());
    assert_eq!(g.lease.credit, 400, "100 of 1000 is reserve");
    let denied = l.apply(Nanos(0), acquire("c", 10, 1)).unwrap();
    assert!(matches!(
        denied,
        Outcome::Denied {
            reason: DenyReason::ReserveOnly,
            ..
        }
    ));
    let mut vip = acquire("d", 10, 1);
    if let Command::Acquire(a) = &mut vip {
        a.priority = 9;
    }
    assert_eq!(granted(l.apply(Nanos(0), vip).unwrap()).lease.credit, 10);
}

#[test]
fn release_returns_unused_and_closes_for_good() {
    let mut l = root();
    let lease = granted(l.apply(Nanos(0), acquire("a", 300, 1)).unwrap()).lease;
    let rel = Command::Release(Release {
        holder_id: "a".into(),
        lease_id: lease.lease_id,
        final_used: 120,
        request_id: 2,
    });
    let out = l.apply(Nanos(SEC), rel.clone()).unwrap();
    assert_eq!(
        out,
        Outcome::Released {
            reclaimed: 180,
            stranded: 0
        }
    );
    assert_eq!(l.apply(Nanos(SEC), rel).unwrap(), out, "retry replays");
    let late = Command::Report(Report {
        holder_id: "a".into(),
        lease_id: lease.lease_id,
        used: 120,
        return_credit: 0,
        want_credit: 10,
        demand_milli_per_sec: 0,
        request_id: 3,
        priority: 0,
    });
    assert!(matches!(
        l.apply(Nanos(SEC), late),
        Err(LedgerError::LeaseClosed { .. })
    ));
    let acct = l.account("k").unwrap();
    assert_eq!(acct.outstanding, 0);
    assert_eq!(acct.stats.used, 120);
    assert!(l.conserved());
}

#[test]
fn expiry_strands_unreported_credit() {
    let mut l = root();
    let lease = granted(l.apply(Nanos(0), acquire("a", 300, 1)).unwrap()).lease;
    let report = Command::Report(Report {
        holder_id: "a".into(),
        lease_id: lease.lease_id,
        used: 100,
        return_credit: 50,
        want_credit: 0,
        demand_milli_per_sec: 0,
        request_id: 2,
        priority: 0,
    });
    let renewed = granted(l.apply(Nanos(SEC), report).unwrap()).lease;
    assert_eq!(renewed.credit, 250);
    assert_eq!(renewed.issued_at_ns, SEC);
    let out = l.apply(Nanos(11 * SEC), Command::Tick).unwrap();
    assert_eq!(
        out,
        Outcome::Ticked {
            expired: 0,
            stranded: 0
        },
        "grace not over"
    );
    let out = l.apply(Nanos(12 * SEC), Command::Tick).unwrap();
    assert_eq!(
        out,
        Outcome::Ticked {
            expired: 1,
            stranded: 150
        }
    );
    assert_eq!(l.account("k").unwrap().stats.stranded, 150);
    assert!(l.conserved());
}

#[test]
fn stale_version_gets_a_replacement_and_old_lease_closes() {
    let mut l = root();
    let old = granted(l.apply(Nanos(0), acquire("a", 100, 1)).unwrap()).lease;
    l.apply(Nanos(1), Command::PutPolicy(params(2))).unwrap();
    let report = Command::Report(Report {
        holder_id: "a".into(),
        lease_id: old.lease_id,
        used: 10,
        return_credit: 0,
        want_credit: 50,
        demand_milli_per_sec: 0,
        request_id: 2,
        priority: 0,
    });
    let g = granted(l.apply(Nanos(2), report).unwrap());
    let new = *g.replacement.expect("replacement under version 2");
    assert_eq!(new.policy_version, 2);
    assert_eq!(l.lease(old.lease_id).unwrap().state, LeaseState::Closing);
    assert!(l.conserved());
}

#[test]
fn outstanding_credit_holds_back_refill() {
    let mut l = root();
    granted(l.apply(Nanos(0), acquire("a", 500, 1)).unwrap());
    granted(l.apply(Nanos(0), acquire("b", 400, 1)).unwrap());
    l.apply(Nanos(100 * SEC), Command::Tick).unwrap();
    // Leases expired and were written off: bucket may refill to the whole burst again.
    let acct = l.account("k").unwrap().clone();
    assert_eq!(acct.outstanding, 0);
    let mut l2 = root();
    granted(l2.apply(Nanos(0), acquire("a", 500, 1)).unwrap());
    granted(l2.apply(Nanos(0), acquire("b", 400, 1)).unwrap());
    // Nine seconds later, at 100/s, the bucket would hold 1000 without the cap.
    let c = l2.apply(Nanos(9 * SEC), acquire("c", 500, 1)).unwrap();
    assert!(
        matches!(
            c,
            Outcome::Denied {
                reason: DenyReason::ReserveOnly,
                ..
            }
        ),
        "burst 1000 - outstanding 900 leaves only the 100 reserve: {c:?}"
    );
    assert_eq!(l2.account("k").unwrap().free_now(), 100);
}

#[test]
fn delegated_ledger_subleases_only_upstream_credit() {
    let mut l = Ledger::new(LedgerConfig::delegated("region"));
    l.apply(Nanos(0), Command::PutPolicy(params(1))).unwrap();
    assert!(matches!(
        l.apply(Nanos(0), acquire("a", 10, 1)).unwrap(),
        Outcome::Denied {
            reason: DenyReason::Exhausted,
            ..
        }
    ));
    l.apply(Nanos(0), upstream_granted(77, 200, 3 * SEC))
        .unwrap();
    let g = granted(l.apply(Nanos(SEC), acquire("a", 500, 2)).unwrap());
    assert_eq!(g.lease.credit, 180, "10% reserve of the 200 pool");
    assert_eq!(g.lease.parent_lease_id, Some(77));
    assert!(
        g.lease.grantor_expiry_ns() <= 3 * SEC,
        "never outlives upstream"
    );
    let pos = l.upstream_position("k").unwrap();
    assert_eq!((pos.idle, pos.on_lease, pos.used), (20, 180, 0));
    assert_eq!(pos.final_used(), None, "sub-leases out: cannot release yet");
    assert!(l.conserved());
}

#[test]
fn nothing_is_subleased_in_an_upstream_lease_tail() {
    let mut l = Ledger::new(LedgerConfig::delegated("region"));
    l.apply(Nanos(0), Command::PutPolicy(params(1))).unwrap();
    l.apply(Nanos(0), upstream_granted(5, 200, 3 * SEC))
        .unwrap();
    let early = Nanos(3 * SEC - 260_000_000);
    let g = granted(l.apply(early, acquire("a", 10, 1)).unwrap());
    assert_eq!(g.lease.credit, 10);
    // ttl 10 s: the tail is min(1 s, 250 ms). 240 ms before the deadline nothing is
    // sub-leased, and the holder is told to come back when the upstream lease ends.
    let late = Nanos(3 * SEC - 240_000_000);
    match l.apply(late, acquire("a", 10, 2)).unwrap() {
        Outcome::Denied {
            reason: DenyReason::Exhausted,
            retry_after_ns,
        } => assert_eq!(retry_after_ns, 240_000_000),
        other => panic!("expected a denial in the tail, got {other:?}"),
    }
    assert!(l.conserved());
}

#[test]
fn a_replayed_upstream_version_never_extends_its_deadline() {
    let mut l = Ledger::new(LedgerConfig::delegated("region"));
    l.apply(Nanos(0), Command::PutPolicy(params(1))).unwrap();
    let up = |credit, deadline, generation| {
        Command::UpstreamGranted(UpstreamLease {
            policy_id: "p".into(),
            key: "k".into(),
            upstream_lease_id: 9,
            credit,
            deadline: Nanos(deadline),
            generation,
        })
    };
    l.apply(Nanos(0), up(100, 3 * SEC, 1)).unwrap();
    l.apply(Nanos(SEC), up(100, 4 * SEC, 1)).unwrap();
    let pos = l.upstream_position("k").unwrap();
    assert_eq!((pos.deadline, pos.generation), (Nanos(3 * SEC), 1));
    l.apply(Nanos(SEC), up(150, 5 * SEC, 2)).unwrap();
    let ret = Command::UpstreamReturn {
        key: "k".into(),
        units: 30,
    };
    l.apply(Nanos(SEC), ret).unwrap();
    let pos = l.upstream_position("k").unwrap();
    assert_eq!((pos.deadline, pos.generation), (Nanos(5 * SEC), 2));
    assert_eq!((pos.credit, pos.idle, pos.returned), (120, 120, 30));
    let closed = Command::UpstreamClosed {
        key: "k".into(),
        released: true,
    };
    l.apply(Nanos(SEC), closed).unwrap();
    l.apply(Nanos(SEC), up(50, 6 * SEC, 1)).unwrap();
    let pos = l.upstream_position("k").unwrap();
    assert_eq!((pos.generation, pos.returned, pos.idle), (1, 0, 50));
    assert!(l.conserved());
}

#[test]
fn policy_documents_map_onto_ledger_params() {
    let yaml = "id: api\nkey: [tenant]\ndimensions: [{name: tenant}]\nrate: {units: 100, per: 1s}\nburst: 300\nlease: {ttl: 5s, max_credit: 50, reserve_fraction: 0.2, refresh_horizon: 500ms}\n";
    let policy = crate::policy::Policy::from_yaml(yaml).expect("valid policy");
    let p = PolicyParams::from_policy(&policy, 4).unwrap();
    assert_eq!((p.version, p.burst, p.rate.units()), (4, 300, 100));
    assert_eq!(p.lease.ttl_ms, 5_000);
    assert_eq!(p.lease.max_credit, 50);
    assert_eq!(p.lease.reserve_ppm, 200_000);
    assert_eq!(p.lease.refresh_horizon_ms, 500);
}

#[test]
fn budget_weights_split_a_contended_key() {
    let mut l = root();
    let mut weights = std::collections::BTreeMap::new();
    weights.insert("eu".to_string(), 3);
    weights.insert("us".to_string(), 1);
    let budget = Budget {
        policy_id: "p".into(),
        weights,
        reserve_ppm: Some(0),
    };
    l.apply(Nanos(0), Command::SetBudget(budget)).unwrap();
    let ask = |h: &str, id| {
        Command::Acquire(Acquire {
            holder_id: h.into(),
            policy_id: "p".into(),
            key: "k".into(),
            want_credit: 1_000,
            demand_milli_per_sec: 1_000_000,
            request_id: id,
            priority: 0,
        })
    };
    // Both want 2000 per 2 s horizon against 200 produced: shares 150 and 50.
    granted(l.apply(Nanos(0), ask("us", 1)).unwrap());
    let eu = granted(l.apply(Nanos(0), ask("eu", 1)).unwrap());
    assert_eq!(eu.lease.credit, 150);
    assert!(matches!(
        l.apply(
            Nanos(0),
            Command::SetBudget(Budget {
                policy_id: "nope".into(),
                ..Budget::default()
            })
        ),
        Err(LedgerError::UnknownPolicy(_))
    ));
}

#[test]
fn a_delegated_ledger_owns_the_policies_scoped_at_its_level() {
    let mut l = Ledger::new(LedgerConfig::delegated("eu"));
    let regional = PolicyParams {
        policy_id: "r".into(),
        owner: Level::Region,
        ..params(1)
    };
    let cellular = PolicyParams {
        policy_id: "c".into(),
        owner: Level::Cell,
        ..params(1)
    };
    for p in [params(1), regional, cellular] {
        l.apply(Nanos(0), Command::PutPolicy(p)).unwrap();
    }
    let ask = |policy: &str, key: &str| {
        Command::Acquire(Acquire {
            holder_id: "agent-1".into(),
            policy_id: policy.into(),
            key: key.into(),
            want_credit: 10,
            demand_milli_per_sec: 0,
            request_id: 1,
            priority: 0,
        })
    };
    // A global policy's credit comes from upstream, and none has come yet.
    assert!(matches!(
        l.apply(Nanos(0), ask("p", "k")).unwrap(),
        Outcome::Denied { .. }
    ));
    assert!(matches!(
        l.account("k").unwrap().supply,
        Supply::Upstream(_)
    ));
    // Region and cell scopes are this ledger's own budgets (no cell level below it).
    for (policy, key) in [("r", "rk"), ("c", "ck")] {
        assert_eq!(
            granted(l.apply(Nanos(0), ask(policy, key)).unwrap())
                .lease
                .credit,
            10
        );
        assert!(matches!(l.account(key).unwrap().supply, Supply::Bucket(_)));
    }
    assert!(l.conserved());
}
