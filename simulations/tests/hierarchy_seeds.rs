//! The in-process hierarchy over several seeds: the budget bound holds in every window,
//! every ledger conserves its units, overload uses the budget, and a run replays exactly.

use leasehold_simulations::hierarchy::{Hierarchy, HierarchyConfig};

fn run(seed: u64, load_factor_pct: u64) -> Hierarchy {
    let cfg = HierarchyConfig {
        seed,
        duration_s: 20,
        load_factor_pct,
        crash_agent_at_s: Some(7),
        ..HierarchyConfig::default()
    };
    let steps = cfg.duration_s * 1_000 / cfg.step_ms;
    let mut sim = Hierarchy::new(cfg).expect("valid config");
    for _ in 0..steps {
        sim.step();
        assert!(
            sim.conserved(),
            "seed {seed}: a ledger lost or minted a unit"
        );
    }
    let log = sim.promises();
    assert!(log.is_clean(), "seed {seed}: {:?}", log.first_any());
    sim
}

#[test]
fn bound_holds_and_overload_uses_the_budget() {
    for seed in 1..=6 {
        let sim = run(seed, 180);
        let check = sim.check();
        assert_eq!(
            check.violations, 0,
            "seed {seed}: worst excess {}",
            check.worst_excess
        );
        let admitted = sim.levels().agents.admitted;
        assert!(
            admitted * 100 >= sim.bound() * 90,
            "seed {seed}: overload admitted only {admitted} of {}",
            sim.bound()
        );
    }
}

#[test]
fn light_load_is_served_in_full() {
    let sim = run(3, 40);
    let v = sim.levels().agents;
    assert!(
        v.rejected * 100 <= v.offered,
        "{} of {} rejected at 40% load",
        v.rejected,
        v.offered
    );
}

#[test]
fn a_seed_replays_exactly() {
    let (a, b) = (run(9, 150), run(9, 150));
    assert_eq!(a.levels().agents, b.levels().agents);
}

#[test]
fn bad_configuration_is_refused_by_name() {
    let cfg = HierarchyConfig {
        step_ms: 0,
        ..HierarchyConfig::default()
    };
    let err = Hierarchy::new(cfg).err().expect("refused").to_string();
    assert!(err.contains("step_ms"), "{err}");
}
