//! A restore carries every policy, version and count over, and never grants again what was
//! leased before the backup.

use super::*;
use crate::replica::Machine;
use crate::state::StateCommand;
use leasehold_common::ledger::{Acquire, LedgerConfig, Outcome};

const QUOTA: &str = "id: cq\ndimensions: [{name: tenant}]\nkey: [tenant]\nscope: global\n\
    algorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 10}\n";
const T0: Nanos = Nanos(1_750_000_000_000_000_000);
const KEY: &str = "cq:tenant=acme";

fn apply_quota(s: &mut AllocatorState, yaml: &str) {
    let out = s.apply(
        T0,
        StateCommand::ApplyPolicy {
            yaml: yaml.into(),
            shadow: false,
            effective_at_ns: 0,
            actor: "admin/ops".into(),
        },
    );
    assert!(matches!(out, StateOutput::Policy { .. }), "{out:?}");
}

/// Credit granted to `holder` for the quota's key at `at` (0 when refused).
fn acquire(s: &mut AllocatorState, at: Nanos, holder: &str, want: u64, request_id: u64) -> u64 {
    let cmd = Command::Acquire(Acquire {
        holder_id: holder.into(),
        policy_id: "cq".into(),
        key: KEY.into(),
        want_credit: want,
        demand_milli_per_sec: 0,
        request_id,
        priority: 0,
    });
    match s.apply(at, StateCommand::Ledger(cmd)) {
        StateOutput::Ledger(Ok(Outcome::Granted(g))) => g.lease.credit,
        _ => 0,
    }
}

fn restore(into: &mut AllocatorState, at: Nanos, bytes: Vec<u8>) -> StateOutput {
    into.apply(
        at,
        StateCommand::Restore {
            backup: bytes,
            reason: "disaster drill".into(),
            actor: "admin/ops".into(),
        },
    )
}

#[test]
fn a_restored_cluster_keeps_policies_and_usage_and_counts_outstanding_leases_as_spent() {
    let mut old = AllocatorState::new(LedgerConfig::root("global"));
    apply_quota(&mut old, QUOTA);
    apply_quota(
        &mut old,
        &QUOTA.replace("units: 10}", "units: 10}\ndescription: v2"),
    );
    let leased = acquire(&mut old, T0, "gw-1", 4, 1);
    assert!(leased > 0);
    let bytes = old.backup(T0).unwrap();

    let mut new = AllocatorState::new(LedgerConfig::root("global"));
    let later = T0.saturating_add_ns(1_000_000_000);
    let out = restore(&mut new, later, bytes);
    let StateOutput::Restored(r) = out else {
        panic!("not restored: {out:?}");
    };
    assert_eq!(
        (r.policies, r.leases_written_off, r.units_written_off),
        (1, 1, leased)
    );
    assert_eq!(r.epoch, old.ledger().epoch() + 1);
    assert_eq!(new.ledger().epoch(), r.epoch);
    assert_eq!(new.policies().get("cq").unwrap().version, 2);
    assert_eq!(new.policies().get_version("cq", 1).unwrap().version, 1);
    let actions: Vec<&str> = new.audit().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["policy.apply", "policy.apply", "cluster.restore"]);

    // The period's 10 units: what was leased before the backup is never granted again.
    let mut granted = 0;
    for (i, holder) in ["gw-1", "gw-2", "gw-3", "gw-4"].iter().enumerate() {
        granted += acquire(&mut new, later, holder, 10, 100 + i as u64);
    }
    assert!(
        granted + leased <= 10,
        "granted {granted} after restoring with {leased} leased"
    );
    assert!(granted > 0, "the rest of the period was not available");
}

#[test]
fn a_restore_is_refused_unless_the_cluster_is_a_new_root_of_the_same_name() {
    let mut old = AllocatorState::new(LedgerConfig::root("global"));
    apply_quota(&mut old, QUOTA);
    let bytes = old.backup(T0).unwrap();

    let mut used = AllocatorState::new(LedgerConfig::root("global"));
    apply_quota(&mut used, QUOTA);
    let mut other = AllocatorState::new(LedgerConfig::root("other"));
    let mut region = AllocatorState::new(LedgerConfig::delegated("region-eu"));
    for (state, why) in [
        (&mut used, "already holds policies"),
        (&mut other, "is of cluster 'global'"),
        (&mut region, "only a root cluster"),
    ] {
        let before = state.clone();
        match restore(state, T0, bytes.clone()) {
            StateOutput::Refused(e) => assert!(e.to_string().contains(why), "{e}"),
            out => panic!("restored ({why}): {out:?}"),
        }
        assert_eq!(*state, before, "a refused restore changed the state");
    }
    assert!(region
        .backup(T0)
        .unwrap_err()
        .to_string()
        .contains("back up the root"));
}

#[test]
fn bytes_that_are_not_a_backup_are_refused_naming_why() {
    let mut fresh = AllocatorState::new(LedgerConfig::root("global"));
    let good = {
        let mut old = AllocatorState::new(LedgerConfig::root("global"));
        apply_quota(&mut old, QUOTA);
        old.backup(T0).unwrap()
    };
    let mut other_version = good.clone();
    other_version[0] = 99;
    for (bytes, why) in [
        (Vec::new(), "empty"),
        (other_version, "format version 99"),
        (good[..good.len() / 2].to_vec(), "not a backup"),
    ] {
        match restore(&mut fresh, T0, bytes) {
            StateOutput::Refused(e) => assert!(e.to_string().contains(why), "{why}: {e}"),
            out => panic!("{why}: {out:?}"),
        }
    }
}
