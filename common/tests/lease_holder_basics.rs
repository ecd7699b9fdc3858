//! Holder-side lease bookkeeping, example by example: deadlines, spending, renewals,
//! returns, reports, refresh sizing and closing.

use leasehold_common::lease::{
    Demand, HeldLease, HolderConfig, Lease, LeaseState, RenewalError, SpendError,
};
use leasehold_common::time::Nanos;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn lease(credit: u64, ttl_ms: u64, generation: u64) -> Lease {
    Lease {
        lease_id: 7,
        grantor_id: "region-eu".into(),
        policy_id: "api".into(),
        policy_version: 1,
        key: "tenant=acme".into(),
        holder_id: "agent-1".into(),
        credit,
        epoch: 4,
        issued_at_ns: 0,
        ttl_ms,
        generation,
        parent_lease_id: None,
        key_id: String::new(),
        signature: Vec::new(),
    }
}

fn config() -> HolderConfig {
    HolderConfig {
        max_drift_ppm: 1_000,
        safety_margin_ms: 100,
        refresh_horizon_ms: 2_000,
        min_request_credit: 5,
        max_request_credit: 1_000,
        ..HolderConfig::default()
    }
}

fn held(credit: u64) -> HeldLease {
    HeldLease::new(lease(credit, 10_000, 1), Nanos(SEC), config()).unwrap()
}

#[test]
fn deadline_is_shortened_by_drift_and_margin() {
    let h = held(10);
    // 10 s × (1 − 0.001) − 0.1 s, counted from the send time (1 s).
    assert_eq!(h.deadline(), Nanos(SEC + 9_890 * MS));
    assert_eq!(config().valid_for_ns(50), 0, "margin larger than the ttl");
    let no_margin = HolderConfig {
        safety_margin_ms: 0,
        max_drift_ppm: 0,
        ..config()
    };
    assert_eq!(no_margin.valid_for_ns(3), 3 * MS);
}

#[test]
fn spending_stops_at_credit() {
    let mut h = held(10);
    let now = Nanos(2 * SEC);
    h.try_spend(6, now).unwrap();
    h.try_spend(0, now).unwrap();
    assert_eq!(
        h.try_spend(5, now),
        Err(SpendError::InsufficientCredit {
            requested: 5,
            available: 4
        })
    );
    assert_eq!(h.spent(), 6, "a refused spend charges nothing");
    h.try_spend(4, now).unwrap();
    assert_eq!(h.spendable(now), 0);
}

#[test]
fn spending_stops_at_the_deadline_and_stays_stopped() {
    let mut h = held(100);
    let deadline = h.deadline();
    h.try_spend(1, deadline.saturating_sub_ns(1)).unwrap();
    assert!(!h.is_expired(deadline.saturating_sub_ns(1)));
    assert!(h.is_expired(deadline));
    assert_eq!(h.spendable(deadline), 0);
    assert_eq!(
        h.try_spend(1, deadline),
        Err(SpendError::Expired {
            deadline_ns: deadline.0
        })
    );
    assert_eq!(h.state(), LeaseState::Expired);
    // The clock stepping back does not reopen it, nor does a renewal.
    assert!(h.try_spend(1, Nanos(SEC)).is_err());
    assert_eq!(h.spendable(Nanos(SEC)), 0);
    assert!(matches!(
        h.apply_renewal(lease(200, 10_000, 2), Nanos(20 * SEC)),
        Err(RenewalError::NotActive { .. })
    ));
}

#[test]
fn a_reading_behind_the_newest_cannot_dodge_expiry() {
    let mut h = held(100);
    let deadline = h.deadline();
    // Seen past the deadline by a report, then a spend with an earlier reading.
    let _ = h.report(deadline.saturating_add_ns(5), Demand::ZERO);
    assert_eq!(
        h.try_spend(1, Nanos(2 * SEC)),
        Err(SpendError::Expired {
            deadline_ns: deadline.0
        })
    );
}

#[test]
fn renewal_raises_credit_and_moves_the_deadline_from_the_send_time() {
    let mut h = held(10);
    h.try_spend(10, Nanos(2 * SEC)).unwrap();
    let sent = Nanos(5 * SEC);
    let _ = h.report(sent, Demand::from_units_per_s(5));
    h.apply_renewal(lease(30, 4_000, 2), sent).unwrap();
    assert_eq!(h.deadline(), Nanos(5 * SEC + 3_896 * MS));
    assert_eq!(h.spendable(Nanos(6 * SEC)), 20);
    assert_eq!(h.lease().generation, 2);
    assert_eq!(h.sent_at(), sent);
}

#[test]
fn invalid_renewals_change_nothing() {
    let mut h = held(10);
    h.try_spend(8, Nanos(2 * SEC)).unwrap();
    let before = (h.deadline(), h.ceiling(), h.lease().clone());
    let mut other_id = lease(50, 10_000, 2);
    other_id.lease_id = 8;
    let mut other_key = lease(50, 10_000, 2);
    other_key.key = "tenant=evil".into();
    let mut new_policy = lease(50, 10_000, 2);
    new_policy.policy_version = 2;
    let mut old_epoch = lease(50, 10_000, 2);
    old_epoch.epoch = 3;
    let cases = [
        (
            other_id,
            RenewalError::WrongLeaseId {
                held: 7,
                offered: 8,
            },
        ),
        (
            other_key,
            RenewalError::IdentityChanged {
                lease_id: 7,
                field: "key",
            },
        ),
        (
            new_policy,
            RenewalError::IdentityChanged {
                lease_id: 7,
                field: "policy_version",
            },
        ),
        (
            lease(50, 10_000, 1),
            RenewalError::StaleGeneration {
                lease_id: 7,
                held: 1,
                offered: 1,
            },
        ),
        (
            old_epoch,
            RenewalError::StaleEpoch {
                lease_id: 7,
                held: 4,
                offered: 3,
            },
        ),
        (
            lease(7, 10_000, 2),
            RenewalError::CreditBelowSpent {
                lease_id: 7,
                credit: 7,
                spent: 8,
            },
        ),
    ];
    for (new, want) in cases {
        assert_eq!(h.apply_renewal(new, Nanos(3 * SEC)), Err(want.clone()));
        assert_eq!(
            (h.deadline(), h.ceiling(), h.lease().clone()),
            before,
            "{want}"
        );
    }
}

#[test]
fn returned_credit_is_never_spendable_again() {
    let mut h = held(100);
    let t = Nanos(2 * SEC);
    h.try_spend(30, t).unwrap();
    assert_eq!(h.prepare_return(50), 50);
    assert_eq!(h.spendable(t), 20);
    assert_eq!(
        h.prepare_return(1_000),
        20,
        "only unspent credit can go back"
    );
    assert_eq!(h.spendable(t), 0);
    let r = h.report(Nanos(3 * SEC), Demand::ZERO);
    assert_eq!((r.used, r.return_credit), (30, 70));
}

#[test]
fn a_renewal_from_before_the_return_still_withholds_it() {
    let mut h = held(100);
    let _ = h.report(Nanos(2 * SEC), Demand::ZERO); // carries no return
    h.prepare_return(40);
    let _ = h.report(Nanos(3 * SEC), Demand::ZERO); // carries return_credit = 40
                                                    // The grantor answers the first report: its credit does not reflect the return.
    h.apply_renewal(lease(100, 10_000, 2), Nanos(2 * SEC))
        .unwrap();
    assert_eq!(h.spendable(Nanos(4 * SEC)), 60);
    // Then the second: credit reduced by the return, nothing withheld any more.
    h.apply_renewal(lease(60, 10_000, 3), Nanos(3 * SEC))
        .unwrap();
    assert_eq!(h.spendable(Nanos(4 * SEC)), 60);
}

#[test]
fn reports_are_cumulative_and_final_after_close() {
    let mut h = held(100);
    h.try_spend(10, Nanos(2 * SEC)).unwrap();
    let r1 = h.report(Nanos(2 * SEC), Demand::ZERO);
    h.try_spend(5, Nanos(3 * SEC)).unwrap();
    h.prepare_return(5);
    let r2 = h.report(Nanos(3 * SEC), Demand::ZERO);
    assert_eq!((r1.used, r1.return_credit, r1.final_usage), (10, 0, false));
    assert_eq!(
        (r2.used, r2.return_credit, r2.lease_id, r2.generation),
        (15, 5, 7, 1)
    );
    assert_eq!(h.close_for_release(), 15);
    assert_eq!(h.state(), LeaseState::Closing { replaced: false });
    assert!(h.report(Nanos(4 * SEC), Demand::ZERO).final_usage);
}

#[test]
fn nothing_spends_after_close_release_or_revoke() {
    let t = Nanos(2 * SEC);
    let mut closed = held(100);
    assert_eq!(closed.close_for_replacement(), 0);
    let mut released = held(100);
    released.close_for_release();
    released.mark_released();
    let mut revoked = held(100);
    revoked.mark_revoked();
    for (h, state) in [
        (&mut closed, LeaseState::Closing { replaced: true }),
        (&mut released, LeaseState::Released),
        (&mut revoked, LeaseState::Revoked),
    ] {
        assert_eq!(h.state(), state);
        assert_eq!(h.try_spend(1, t), Err(SpendError::NotActive { state }));
        assert_eq!(h.spendable(t), 0);
        assert_eq!(h.prepare_return(10), 0);
        assert_eq!(h.needs_refresh(t, Demand::from_units_per_s(100)), None);
        assert!(h.apply_renewal(lease(500, 10_000, 9), t).is_err());
    }
    released.mark_revoked();
    assert_eq!(released.state(), LeaseState::Released, "release is final");
}

#[test]
fn refresh_asks_before_credit_runs_dry() {
    let mut h = held(100);
    let t = Nanos(2 * SEC);
    let demand = Demand::from_units_per_s(10); // 20 units per 2 s horizon
    h.try_spend(75, t).unwrap();
    assert_eq!(h.needs_refresh(t, demand), None, "25 left lasts 2.5 s");
    h.try_spend(6, t).unwrap();
    assert_eq!(h.needs_refresh(t, demand), Some(20), "19 left lasts 1.9 s");
    assert_eq!(
        h.needs_refresh(t, Demand(1)),
        None,
        "a trickle never runs dry"
    );
    h.try_spend(19, t).unwrap();
    assert_eq!(h.needs_refresh(t, Demand::ZERO), None);
    assert_eq!(
        h.needs_refresh(t, Demand(1)),
        Some(5),
        "clamped to min_request_credit"
    );
    let flood = Demand::from_units_per_s(1_000_000);
    assert_eq!(
        h.needs_refresh(t, flood),
        Some(1_000),
        "clamped to max_request_credit"
    );
    assert_eq!(h.report(t, demand).want_credit, 20);
}

#[test]
fn refresh_asks_before_the_deadline() {
    let h = held(100);
    let near = h.deadline().saturating_sub_ns(2 * SEC);
    assert_eq!(
        h.needs_refresh(near.saturating_sub_ns(1), Demand::ZERO),
        None
    );
    assert_eq!(h.needs_refresh(near, Demand::ZERO), Some(5));
    assert_eq!(
        h.needs_refresh(h.deadline(), Demand::ZERO),
        None,
        "too late"
    );
}

#[test]
fn config_validation_names_the_field() {
    let bad = [
        (
            HolderConfig {
                max_drift_ppm: 100_001,
                ..config()
            },
            "max_drift_ppm",
        ),
        (
            HolderConfig {
                safety_margin_ms: 60_001,
                ..config()
            },
            "safety_margin_ms",
        ),
        (
            HolderConfig {
                refresh_horizon_ms: 0,
                ..config()
            },
            "refresh_horizon_ms",
        ),
        (
            HolderConfig {
                min_request_credit: 0,
                ..config()
            },
            "min_request_credit",
        ),
        (
            HolderConfig {
                max_request_credit: 4,
                ..config()
            },
            "max_request_credit",
        ),
        (
            HolderConfig {
                demand_slot_ms: 0,
                ..config()
            },
            "demand_slot_ms",
        ),
        (
            HolderConfig {
                demand_slots: 65,
                ..config()
            },
            "demand_slots",
        ),
        (
            HolderConfig {
                reports_tracked_max: 0,
                ..config()
            },
            "reports_tracked_max",
        ),
    ];
    for (cfg, field) in bad {
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.field, field);
        assert!(err.to_string().contains(field), "{err}");
        assert!(HeldLease::new(lease(1, 1, 1), Nanos::ZERO, cfg).is_err());
    }
    HolderConfig::default().validate().unwrap();
}
