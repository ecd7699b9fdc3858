//! Usage is booked once per unit the ledger accepted, per hour, and travels with the state.

use super::super::earlier::SNAPSHOT_FORMAT_WITHOUT_USAGE;
use super::super::records::{AuditEntry, Emergency, Event, Ring};
use super::super::{Pending, PolicyMeta, ShadowBook, StateCommand};
use super::*;
use crate::raft::machine::{decode_snapshot, encode_snapshot};
use crate::replica::Machine;
use crate::state::backup::Backup;
use leasehold_common::ledger::usage::USAGE_BUCKET_NS;
use leasehold_common::ledger::{Acquire, Ledger, LedgerConfig, UsageLimits, UsageQuery};
use leasehold_common::policy::PolicySet;
use serde::Serialize;
use std::collections::BTreeMap;

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100, per: 1s}\nburst: 200\nlease: {ttl: 5s, refresh_horizon: 500ms, reserve_fraction: 0}\n";
const HOUR: u64 = USAGE_BUCKET_NS;
const T0: Nanos = Nanos(10 * HOUR);
const KEY: &str = "api:tenant=acme";

fn state() -> AllocatorState {
    let mut s = AllocatorState::new(LedgerConfig::root("global"));
    let out = s.apply(
        T0,
        StateCommand::ApplyPolicy {
            yaml: POLICY.into(),
            shadow: false,
            effective_at_ns: 0,
            actor: "admin/ops".into(),
        },
    );
    assert!(matches!(out, StateOutput::Policy { .. }), "{out:?}");
    s
}

/// A lease of 50 units for `holder`: its id.
fn acquire(s: &mut AllocatorState, at: Nanos, holder: &str, request_id: u64) -> u64 {
    let cmd = Command::Acquire(Acquire {
        holder_id: holder.into(),
        policy_id: "api".into(),
        key: KEY.into(),
        want_credit: 50,
        demand_milli_per_sec: 0,
        request_id,
        priority: 0,
    });
    match s.apply(at, StateCommand::Ledger(cmd)) {
        StateOutput::Ledger(Ok(Outcome::Granted(g))) => g.lease.lease_id,
        other => panic!("not granted: {other:?}"),
    }
}

fn report(holder: &str, lease_id: u64, request_id: u64, used: u64, refused: u64) -> StateCommand {
    let r = Report {
        holder_id: holder.into(),
        lease_id,
        used,
        return_credit: 0,
        want_credit: 0,
        demand_milli_per_sec: 0,
        request_id,
        priority: 0,
    };
    let counts = HolderCounts {
        refused,
        shaped: 0,
        fail_open: 0,
    };
    StateCommand::report(r, 0, counts)
}

fn total(s: &AllocatorState, since_ns: u64, until_ns: u64) -> UsageCounts {
    s.usage()
        .query(&UsageQuery {
            policy_id: "api",
            key: None,
            since_ns,
            until_ns,
            per_holder: false,
            rows_max: 100,
        })
        .total
}

#[test]
fn repeated_and_duplicated_reports_and_releases_count_once() {
    let mut s = state();
    let id = acquire(&mut s, T0, "gw-1", 1);
    s.apply(T0, report("gw-1", id, 2, 4, 2));
    // The same request again (a retry) and the same figures under a new request id.
    s.apply(T0, report("gw-1", id, 2, 4, 2));
    s.apply(T0, report("gw-1", id, 3, 4, 2));
    let t = total(&s, 0, u64::MAX / 2);
    assert_eq!((t.admitted, t.refused), (4, 2));

    s.apply(T0, report("gw-1", id, 4, 6, 5));
    let release = Release {
        holder_id: "gw-1".into(),
        lease_id: id,
        final_used: 7,
        request_id: 5,
    };
    let counts = HolderCounts {
        refused: 6,
        shaped: 0,
        fail_open: 1,
    };
    let first = s.apply(T0, StateCommand::release(release.clone(), counts));
    let retried = s.apply(T0, StateCommand::release(release, counts));
    assert_eq!(first, retried, "a retried release gets the first answer");
    let t = total(&s, 0, u64::MAX / 2);
    assert_eq!((t.admitted, t.refused, t.fail_open), (7, 6, 1));
    assert_eq!(s.usage().marks_len(), 0, "an ended lease keeps no mark");
    // A report on the released lease is refused and adds nothing.
    s.apply(T0, report("gw-1", id, 6, 9, 9));
    assert_eq!(total(&s, 0, u64::MAX / 2).admitted, 7);
}

#[test]
fn a_stranger_cannot_book_usage_on_someone_elses_lease() {
    let mut s = state();
    let id = acquire(&mut s, T0, "gw-1", 1);
    let out = s.apply(T0, report("gw-2", id, 2, 5, 5));
    assert!(matches!(out, StateOutput::Ledger(Err(_))), "{out:?}");
    assert_eq!(total(&s, 0, u64::MAX / 2), UsageCounts::default());
}

#[test]
fn units_land_in_the_hour_the_report_was_applied() {
    let mut s = state();
    let id = acquire(&mut s, T0, "gw-1", 1);
    s.apply(Nanos(T0.0 + 1_000_000_000), report("gw-1", id, 2, 3, 0));
    // The next report arrives in the following hour: only its growth lands there.
    let next_hour = Nanos(11 * HOUR + 2_000_000_000);
    s.apply(next_hour, report("gw-1", id, 3, 10, 0));
    assert_eq!(total(&s, 10 * HOUR, 11 * HOUR).admitted, 3);
    assert_eq!(total(&s, 11 * HOUR, 12 * HOUR).admitted, 7);
    assert_eq!(total(&s, 10 * HOUR, 12 * HOUR).admitted, 10);
}

#[test]
fn a_lease_that_expires_unreported_is_stranded_as_spent() {
    let mut s = state();
    let id = acquire(&mut s, T0, "gw-1", 1);
    let credit = s.ledger().lease(id).unwrap().lease.credit;
    s.apply(T0, report("gw-1", id, 2, 3, 0));
    let credit = credit.max(s.ledger().lease(id).unwrap().lease.credit);
    s.apply(
        Nanos(T0.0 + 60_000_000_000),
        StateCommand::Ledger(Command::Tick),
    );
    assert!(s.ledger().lease(id).is_none(), "written off");
    let t = total(&s, 0, u64::MAX / 2);
    assert_eq!((t.admitted, t.stranded), (3, credit - 3));
    assert_eq!(s.usage().marks_len(), 0);
}

#[test]
fn usage_past_its_retention_is_dropped_on_tick() {
    let mut s = state().with_usage_limits(UsageLimits {
        retention_hours: 2,
        rows_max: 100,
    });
    let id = acquire(&mut s, T0, "gw-1", 1);
    s.apply(T0, report("gw-1", id, 2, 3, 0));
    s.apply(Nanos(T0.0 + 3 * HOUR), StateCommand::Ledger(Command::Tick));
    assert_eq!(
        s.usage().rows_len(),
        1,
        "the stranded rest, in the newest hour"
    );
    assert_eq!(total(&s, 0, T0.0 + HOUR).admitted, 0);
}

/// [`AllocatorState`] in the layout of releases before usage was recorded.
#[derive(Serialize)]
struct Earlier<'a> {
    ledger: &'a Ledger,
    policies: &'a PolicySet,
    meta: &'a BTreeMap<String, PolicyMeta>,
    pending: &'a BTreeMap<String, Pending>,
    emergency: &'a BTreeMap<String, Emergency>,
    audit: &'a Ring<AuditEntry>,
    events: &'a Ring<Event>,
    shadow: &'a ShadowBook,
}

fn earlier(s: &AllocatorState) -> Earlier<'_> {
    Earlier {
        ledger: &s.ledger,
        policies: &s.policies,
        meta: &s.meta,
        pending: &s.pending,
        emergency: &s.emergency,
        audit: &s.audit,
        events: &s.events,
        shadow: &s.shadow,
    }
}

fn used_state() -> AllocatorState {
    let mut s = state();
    let id = acquire(&mut s, T0, "gw-1", 1);
    s.apply(T0, report("gw-1", id, 2, 3, 1));
    assert!(s.usage().rows_len() > 0);
    s
}

#[test]
fn snapshots_carry_usage_and_earlier_ones_still_load() {
    let s = used_state();
    let bytes = encode_snapshot(&s, T0.0).unwrap();
    let back = decode_snapshot::<AllocatorState>(&bytes).unwrap();
    assert_eq!(back.machine, s);
    assert_eq!(back.timeline_ns, T0.0);

    #[derive(Serialize)]
    struct Snap<'a> {
        timeline_ns: u64,
        machine: Earlier<'a>,
    }
    let snap = Snap {
        timeline_ns: T0.0,
        machine: earlier(&s),
    };
    let old = postcard::to_io(&snap, vec![SNAPSHOT_FORMAT_WITHOUT_USAGE]).unwrap();
    let back = decode_snapshot::<AllocatorState>(&old).unwrap();
    let mut expect = s.clone();
    expect.usage = UsageBook::default();
    assert_eq!(
        back.machine, expect,
        "everything but usage, which starts empty"
    );
}

#[test]
fn backups_carry_usage_and_earlier_ones_still_restore() {
    let s = used_state();
    let bytes = s.backup(T0).unwrap();
    assert_eq!(Backup::from_bytes(&bytes).unwrap().state, s);

    #[derive(Serialize)]
    struct OldBackup<'a> {
        cluster: &'a str,
        taken_at_ns: u64,
        state: Earlier<'a>,
    }
    let old = crate::storage::codec::encode(
        "backup",
        &OldBackup {
            cluster: "global",
            taken_at_ns: T0.0,
            state: earlier(&s),
        },
    )
    .unwrap();
    let back = Backup::from_bytes(&old).unwrap();
    assert_eq!(back.state.ledger, s.ledger);
    assert_eq!(back.state.usage, UsageBook::default());

    // Restoring writes the outstanding lease off; its unreported credit shows as stranded.
    let mut fresh = AllocatorState::new(LedgerConfig::root("global"));
    let out = fresh.apply(
        Nanos(T0.0 + 1_000),
        StateCommand::Restore {
            backup: bytes,
            reason: "drill".into(),
            actor: "admin/ops".into(),
        },
    );
    assert!(matches!(out, StateOutput::Restored(_)), "{out:?}");
    let t = total(&fresh, 0, u64::MAX / 2);
    assert_eq!(t.admitted, 3);
    assert!(t.stranded > 0, "{t:?}");
}

#[test]
fn exact_decisions_book_admitted_and_refused_units_and_refunds_take_them_back() {
    let mut s = AllocatorState::new(LedgerConfig::root("global"));
    let exact = "id: ex\ndimensions: [{name: tenant}]\nkey: [tenant]\nscope: global\n\
                 enforcement: exact\nrate: {units: 5, per: 1h}\nburst: 5\n";
    let out = s.apply(
        T0,
        StateCommand::ApplyPolicy {
            yaml: exact.into(),
            shadow: false,
            effective_at_ns: 0,
            actor: "admin/ops".into(),
        },
    );
    assert!(matches!(out, StateOutput::Policy { .. }), "{out:?}");
    let item = |units| leasehold_common::ledger::DecideItem {
        policy_id: "ex".into(),
        key: "ex:tenant=acme".into(),
        units,
    };
    let decide = |s: &mut AllocatorState, units| match s.apply(
        T0,
        StateCommand::Ledger(Command::Decide(leasehold_common::ledger::Decide {
            items: vec![item(units)],
        })),
    ) {
        StateOutput::Ledger(Ok(Outcome::Decided(d))) => *d,
        other => panic!("not decided: {other:?}"),
    };
    let first = decide(&mut s, 3);
    assert!(first.admitted);
    assert!(!decide(&mut s, 3).admitted, "only 2 left");
    let ex = |s: &AllocatorState| {
        s.usage()
            .query(&UsageQuery {
                policy_id: "ex",
                key: None,
                since_ns: 0,
                until_ns: u64::MAX / 2,
                per_holder: false,
                rows_max: 10,
            })
            .total
    };
    assert_eq!((ex(&s).admitted, ex(&s).refused), (3, 3));
    // Another dimension refused the first request: its units come back, later.
    let refund = leasehold_common::ledger::Refund {
        items: vec![item(3)],
        decided_at: first.at,
    };
    let out = s.apply(
        Nanos(T0.0 + 1_000_000),
        StateCommand::Ledger(Command::Refund(refund)),
    );
    assert_eq!(out, StateOutput::Ledger(Ok(Outcome::Refunded { units: 3 })));
    assert_eq!((ex(&s).admitted, ex(&s).refused), (0, 3));
}

#[test]
fn counts_an_acquire_carries_are_booked_once() {
    let mut s = state();
    let acquire = |request_id| Acquire {
        holder_id: "gw-2".into(),
        policy_id: "api".into(),
        key: KEY.into(),
        want_credit: 50,
        demand_milli_per_sec: 0,
        request_id,
        priority: 0,
    };
    let counts = |refused| HolderCounts {
        refused,
        shaped: 0,
        fail_open: 1,
    };
    s.apply(T0, StateCommand::acquire(acquire(1), counts(4)));
    // A retry of the same request is answered from memory.
    s.apply(T0, StateCommand::acquire(acquire(1), counts(4)));
    let t = total(&s, 0, u64::MAX / 2);
    assert_eq!((t.refused, t.fail_open), (4, 1));
    // The next request carries what came since the answer.
    s.apply(T0, StateCommand::acquire(acquire(2), counts(2)));
    let t = total(&s, 0, u64::MAX / 2);
    assert_eq!((t.refused, t.fail_open), (6, 2));
    // An acquire the ledger refuses (an unknown policy) books nothing.
    let mut unknown = acquire(3);
    unknown.policy_id = "nope".into();
    s.apply(T0, StateCommand::acquire(unknown, counts(9)));
    assert_eq!(total(&s, 0, u64::MAX / 2).refused, 6);
}
