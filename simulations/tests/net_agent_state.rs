//! Agents with state files on the networked simulation: a crashed agent restarts with its
//! file and settles the leases of its previous run at their durable marks, which cover what
//! it admitted under them (P2 across the crash), and such runs replay exactly.

use leasehold_simulations::net::faults::Action;
use leasehold_simulations::net::{run, NetConfig, NetReport, Settlement};

/// Seed 2 with eight faults crashes agents four times, three of them restarting while their
/// leases are still on the grantor's books.
const SEED: u64 = 2;

fn config(agent_state: bool) -> NetConfig {
    NetConfig {
        faults: 8,
        agent_state,
        ..NetConfig::quick()
    }
}

fn assert_p1_p2_kept(r: &NetReport) {
    assert_eq!(r.bound.violations, 0, "P1 broken: {:?}", r.bound);
    assert!(r.ledger_conserved, "ledger out of balance");
    for s in &r.settlements {
        assert!(
            s.holds(),
            "agent {} admitted {} under leases settled as {} spent: {s:?}",
            s.agent,
            s.admitted,
            s.charged()
        );
    }
    assert!(r.passed());
}

/// Crashes whose leases the restarted agent released, having spent under them.
fn released_after_spending(r: &NetReport) -> Vec<&Settlement> {
    r.settlements
        .iter()
        .filter(|s| s.released > 0 && s.admitted > 0)
        .collect()
}

#[test]
fn agent_crashes_with_state_files_replay_exactly() {
    let cfg = config(true);
    let first = run(SEED, &cfg).unwrap();
    let crashes = first
        .applied
        .iter()
        .filter(|f| matches!(f.action, Action::Crash { .. }))
        .count();
    assert!(crashes >= 2, "seed {SEED} crashed {crashes} agents");
    assert!(first.agent_starts.iter().any(|n| *n > 1));
    assert_p1_p2_kept(&first);
    let again = run(SEED, &cfg).unwrap();
    assert_eq!(first.replay_difference(&again), None);
}

/// The restarted agent remembers what its previous run spent only through its state file:
/// with it, it releases the old leases at marks covering every admission under them; without
/// it, it releases none of them (they are written off at expiry, or still open at the end).
#[test]
fn a_restarted_agent_settles_its_previous_spending_only_from_its_state_file() {
    let with = run(SEED, &config(true)).unwrap();
    assert_p1_p2_kept(&with);
    let released = released_after_spending(&with);
    assert!(
        released.len() >= 2,
        "too few crashed runs released by their successor: {:?}",
        with.settlements
    );
    for s in &released {
        assert!(
            s.released_used >= s.admitted,
            "agent {} released at {} after admitting {}",
            s.agent,
            s.released_used,
            s.admitted
        );
    }
    let without = run(SEED, &config(false)).unwrap();
    assert_p1_p2_kept(&without);
    assert_eq!(without.settlements.len(), with.settlements.len());
    assert!(
        released_after_spending(&without).is_empty(),
        "leases released without a state file: {:?}",
        without.settlements
    );
}

/// On a Raft cluster, with leader crashes as well: agents restart from their state files,
/// release their previous leases through whichever node leads, and the run replays exactly.
#[test]
fn a_cluster_run_with_leader_crashes_and_agent_state_files_replays_exactly() {
    let cfg = NetConfig {
        faults: 8,
        leader_crash_at_ms: None,
        agent_state: true,
        ..NetConfig::quick_cluster()
    };
    let seed = 6;
    let first = run(seed, &cfg).unwrap();
    assert!(!first.leader_crashes().is_empty(), "{:?}", first.applied);
    assert_p1_p2_kept(&first);
    assert!(
        !released_after_spending(&first).is_empty(),
        "no crashed run released by its successor: {:?}",
        first.settlements
    );
    let again = run(seed, &cfg).unwrap();
    assert_eq!(first.replay_difference(&again), None);
}
