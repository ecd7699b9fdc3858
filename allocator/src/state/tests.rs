//! Previews change nothing and agree with the change; shadow counts add up exactly once.

use super::*;
use crate::replica::Machine;
use leasehold_common::ledger::Acquire;

const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 100, per: 1s}\nburst: 200\nlease: {ttl: 5s, refresh_horizon: 500ms, reserve_fraction: 0}\n";
const T0: Nanos = Nanos(1_000_000_000);

fn with_policy(config: LedgerConfig) -> AllocatorState {
    let mut s = AllocatorState::new(config);
    let out = s.apply(
        T0,
        StateCommand::ApplyPolicy {
            yaml: POLICY.into(),
            shadow: true,
            effective_at_ns: 0,
            actor: "admin/ops".into(),
        },
    );
    assert!(
        matches!(out, StateOutput::Policy { version: 1, .. }),
        "{out:?}"
    );
    s
}

fn acquire(s: &mut AllocatorState, holder: &str, key: &str) -> u64 {
    let cmd = Command::Acquire(Acquire {
        holder_id: holder.into(),
        policy_id: "api".into(),
        key: key.into(),
        want_credit: 10,
        demand_milli_per_sec: 0,
        request_id: 1,
        priority: 0,
    });
    match s.apply(T0, StateCommand::Ledger(cmd)) {
        StateOutput::Ledger(Ok(Outcome::Granted(g))) => g.lease.lease_id,
        other => panic!("not granted: {other:?}"),
    }
}

fn report(holder: &str, lease_id: u64, request_id: u64, would_deny: u64) -> StateCommand {
    let r = Report {
        holder_id: holder.into(),
        lease_id,
        used: 1,
        return_credit: 0,
        want_credit: 0,
        demand_milli_per_sec: 0,
        request_id,
        priority: 0,
    };
    StateCommand::report(r, would_deny, Default::default())
}

fn would_deny(s: &AllocatorState, version: u64) -> Option<u64> {
    s.shadow_tally("api", version)
        .map(|t| t.would_deny_requests)
}

#[test]
fn rate_preview_changes_nothing_and_matches_the_change() {
    let mut s = with_policy(LedgerConfig::root("g"));
    let before = s.clone();
    let p = s.preview_set_rate("api", 150_500, 300).unwrap();
    assert_eq!(
        s, before,
        "a preview leaves the state as it was, audit included"
    );
    assert_eq!((p.old_rate_milli_per_sec, p.old_burst), (100_000, 200));
    assert_eq!((p.new_rate_milli_per_sec, p.new_burst), (150_500, 300));
    assert!(p.changed);
    assert_eq!(p.version, 2);
    assert!(p.diff.contains("burst: 200 -> 300"), "{}", p.diff);
    let audited = s.audit().count();
    let out = s.apply(
        T0,
        StateCommand::SetRate {
            policy_id: "api".into(),
            rate_milli_per_sec: 150_500,
            burst: 300,
            actor: "admin/ops".into(),
        },
    );
    assert_eq!(
        out,
        StateOutput::Policy {
            policy_id: "api".into(),
            version: p.version,
            changed: true,
            diff: p.diff,
        }
    );
    assert_eq!(s.audit().count(), audited + 1);
    let same = s.preview_set_rate("api", 150_500, 300).unwrap();
    assert!(!same.changed && same.diff.is_empty() && same.version == 2);
}

#[test]
fn rate_preview_refuses_what_the_change_would() {
    let s = with_policy(LedgerConfig::root("g"));
    assert!(matches!(
        s.preview_set_rate("nope", 1_000, 1),
        Err(AdminError::NotFound(m)) if m.contains("'nope'")
    ));
    let mut d = AllocatorState::new(LedgerConfig::delegated("eu"));
    let mirror = StateCommand::MirrorPolicy {
        yaml: POLICY.into(),
        upstream_version: 1,
        actor: "upstream".into(),
    };
    d.apply(T0, mirror);
    assert!(matches!(
        d.preview_set_rate("api", 1_000, 1),
        Err(AdminError::Refused(m)) if m.contains("delegated")
    ));
}

#[test]
fn shadow_counts_add_each_leases_growth_once() {
    let mut s = with_policy(LedgerConfig::root("g"));
    let a = acquire(&mut s, "gw-1", "api:tenant=acme");
    let b = acquire(&mut s, "gw-2", "api:tenant=acme");
    assert_eq!(would_deny(&s, 1), None, "nothing reported yet");
    let plain = {
        let mut p = s.clone();
        p.apply(T0, report("gw-1", a, 2, 0))
    };
    assert_eq!(
        s.apply(T0, report("gw-1", a, 2, 5)),
        plain,
        "same ledger answer"
    );
    assert_eq!(would_deny(&s, 1), Some(5));
    // A retry carries the same cumulative count: nothing more.
    s.apply(T0, report("gw-1", a, 2, 5));
    assert_eq!(would_deny(&s, 1), Some(5));
    s.apply(T0, report("gw-1", a, 3, 8));
    s.apply(T0, report("gw-2", b, 2, 4));
    assert_eq!(would_deny(&s, 1), Some(12));
    // A report the ledger refuses (someone else's lease) counts nothing.
    let refused = s.apply(T0, report("gw-2", a, 4, 100));
    assert!(
        matches!(refused, StateOutput::Ledger(Err(_))),
        "{refused:?}"
    );
    assert_eq!(would_deny(&s, 1), Some(12));
    assert_eq!(would_deny(&s, 2), None, "counts belong to their version");
}

#[test]
fn shadow_marks_of_ended_leases_are_dropped() {
    let mut s = with_policy(LedgerConfig::root("g"));
    let n = shadow::SHADOW_MARKS_PRUNE_AT_MIN as u64 + 10;
    for i in 0..n {
        let holder = format!("gw-{i}");
        let id = acquire(&mut s, &holder, &format!("api:tenant=t{}", i % 50));
        s.apply(T0, report(&holder, id, 2, 1));
        let release = Command::Release(leasehold_common::ledger::Release {
            holder_id: holder,
            lease_id: id,
            final_used: 1,
            request_id: 3,
        });
        s.apply(T0, StateCommand::Ledger(release));
    }
    assert_eq!(would_deny(&s, 1), Some(n));
    assert!(
        s.shadow.marks_len() < shadow::SHADOW_MARKS_PRUNE_AT_MIN,
        "{} marks kept",
        s.shadow.marks_len()
    );
}

/// Snapshot bytes of a state, to compare two states whole.
fn encoded(s: &AllocatorState) -> Vec<u8> {
    postcard::to_allocvec(s).unwrap()
}

#[test]
fn a_lease_batch_applies_as_its_calls_one_by_one_and_nothing_else() {
    let mut batched = with_policy(LedgerConfig::root("global"));
    let lease = acquire(&mut batched, "gw-1", "api:tenant=acme");
    let mut single = batched.clone();
    let other = Acquire {
        holder_id: "gw-1".into(),
        policy_id: "api".into(),
        key: "api:tenant=beta".into(),
        want_credit: 10,
        demand_milli_per_sec: 0,
        request_id: 2,
        priority: 0,
    };
    let calls = vec![
        report("gw-1", lease, 3, 2),
        StateCommand::Ledger(Command::Acquire(other)),
        report("gw-1", 999, 4, 0),
    ];
    let one_by_one: Vec<StateOutput> = calls.iter().map(|c| single.apply(T0, c.clone())).collect();
    let out = batched.apply(T0, StateCommand::LeaseCalls(calls));
    assert_eq!(out, StateOutput::Batch(one_by_one));
    assert_eq!(encoded(&batched), encoded(&single));

    let admin = StateCommand::Revoke {
        lease_id: lease,
        reason: "smuggled".into(),
        actor: "gw-1".into(),
    };
    let nested = StateCommand::LeaseCalls(vec![report("gw-1", lease, 5, 0)]);
    let out = batched.apply(T0, StateCommand::LeaseCalls(vec![admin, nested]));
    let StateOutput::Batch(outs) = out else {
        panic!("{out:?}")
    };
    assert!(
        outs.iter().all(|o| matches!(o, StateOutput::Refused(_))),
        "{outs:?}"
    );
    assert_eq!(encoded(&batched), encoded(&single), "nothing applied");
}
