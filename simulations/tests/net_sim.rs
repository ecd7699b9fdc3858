//! The production allocator service and agents on turmoil's simulated network: every
//! seed keeps P1 through its partitions, latency changes and agent crashes, and two runs
//! of a seed admit the same requests at the same simulated instants.

use leasehold_simulations::net::faults::Action;
use leasehold_simulations::net::{check_admissions, run, NetConfig, NetReport};

fn assert_bound_kept(seed: u64, r: &NetReport) {
    assert_eq!(
        r.bound.violations, 0,
        "seed {seed}: P1 broken, worst excess {} units",
        r.bound.worst_excess
    );
    assert!(r.ledger_conserved, "seed {seed}: ledger out of balance");
    let admitted = r.admissions.len() as u64;
    assert!(
        admitted <= r.admitted_max,
        "seed {seed}: {admitted} > B + r·T = {}",
        r.admitted_max
    );
    // The run means something: demand exceeded the budget and leases carried traffic.
    assert!(r.offered > r.admitted_max, "seed {seed}: too little demand");
    assert!(
        admitted * 2 > r.admitted_max,
        "seed {seed}: only {admitted} admitted of at most {}",
        r.admitted_max
    );
}

#[test]
fn faulty_seeds_keep_the_budget_bound_and_replay_exactly() {
    let cfg = NetConfig::quick();
    for seed in [1, 2] {
        let first = run(seed, &cfg).unwrap();
        assert_bound_kept(seed, &first);
        let again = run(seed, &cfg).unwrap();
        assert_eq!(
            again.schedule, first.schedule,
            "seed {seed}: schedule differs"
        );
        assert_eq!(
            again.admissions, first.admissions,
            "seed {seed}: the admission log differs between two runs"
        );
    }
}

#[test]
fn fault_free_seeds_replay_exactly_and_differ_from_each_other() {
    let cfg = NetConfig {
        faults: 0,
        ..NetConfig::quick()
    };
    let first = run(11, &cfg).unwrap();
    assert_bound_kept(11, &first);
    let again = run(11, &cfg).unwrap();
    assert_eq!(
        again.admissions, first.admissions,
        "the admission log differs between two runs"
    );
    // The agents press against the bound: half the burst would have been exceeded.
    let tighter = check_admissions(&first.admissions, cfg.rate(), cfg.burst / 2);
    assert!(tighter.violations > 0, "the run never approached B + r·T");
    // Link latencies come from the seed, so another seed admits at other instants.
    let other = run(12, &cfg).unwrap();
    assert_bound_kept(12, &other);
    assert_ne!(other.digest(), first.digest());
}

#[test]
fn a_seed_draws_partitions_crashes_and_latency_changes_and_keeps_the_bound() {
    let cfg = NetConfig {
        faults: 12,
        ..NetConfig::quick()
    };
    let r = run(4, &cfg).unwrap();
    let has = |f: fn(&Action) -> bool| r.schedule.iter().any(|s| f(&s.action));
    assert!(has(|a| matches!(a, Action::Partition { .. })));
    assert!(has(|a| matches!(a, Action::Crash { .. })));
    assert!(has(|a| matches!(a, Action::MaxLatency { .. })));
    assert_bound_kept(4, &r);
}
