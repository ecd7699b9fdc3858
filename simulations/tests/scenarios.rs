//! Every scenario at test size over a few seeds: the promises hold, each scenario shows
//! what it is for, runs replay exactly, and the checks catch deliberately broken agents.

mod support;

use support::{fact, run};

use leasehold_simulations::hierarchy::{Defect, Fault, Hierarchy, HierarchyConfig};
use leasehold_simulations::output::csv::to_csv;
use leasehold_simulations::promises::Promise;
use leasehold_simulations::scenario::{self, fuzz, Scale};

const SEEDS: [u64; 2] = [1, 7];

#[test]
fn autoscaling_multiplies_local_buckets_but_not_leases() {
    for seed in SEEDS {
        let r = run("autoscaling", seed);
        // Twelve instances with their own R each admit about 12R.
        assert!(fact(&r, "naive peak ÷ R (%)") >= 1_000, "{:?}", r.facts);
        assert!(fact(&r, "naive windows over B + R·T") > 0);
        assert!(fact(&r, "leased peak (units in 1 s)") <= fact(&r, "leased bound for 1 s (B + R)"));
    }
}

#[test]
fn partitions_keep_the_bound_and_count_fail_open_apart() {
    for seed in SEEDS {
        let r = run("partition", seed);
        assert!(fact(&r, "fail_open: fail-open admissions (uncharged)") > 0);
        assert!(fact(&r, "restricted: emergency admissions (uncharged)") > 0);
        // While region 0's agents are cut off (4 s to 8 s at test size), fail_closed gives
        // up the credit they hold and cached_lease spends it.
        let col = |name: &str| r.series.column(name).expect("column");
        let (t, closed, cached) = (
            col("t_s"),
            col("region0_fail_closed"),
            col("region0_cached_lease"),
        );
        let cut: Vec<_> = r
            .series
            .rows
            .iter()
            .filter(|row| (4..8).contains(&row[t]))
            .collect();
        let sum = |c: usize| cut.iter().map(|row| row[c]).sum::<u64>();
        assert!(!cut.is_empty());
        assert!(
            sum(closed) < sum(cached),
            "{} vs {}",
            sum(closed),
            sum(cached)
        );
    }
}

#[test]
fn crashes_strand_credit_instead_of_regranting_it() {
    for seed in SEEDS {
        let r = run("crash", seed);
        let stranded = fact(&r, "stranded at the root") + fact(&r, "stranded in regions");
        assert!(stranded > 0, "{:?}", r.facts);
        assert!(fact(&r, "admitted") <= fact(&r, "bound over the run (B + R·T)"));
    }
}

#[test]
fn leader_loss_is_retried_without_double_grants() {
    for seed in SEEDS {
        let r = run("leader-loss", seed);
        assert!(fact(&r, "leader losses") > 0);
        assert!(fact(&r, "requests resent after no answer") >= fact(&r, "leader losses"));
    }
}

#[test]
fn clock_rollback_is_detected_and_mints_nothing() {
    for seed in SEEDS {
        let r = run("clock-rollback", seed);
        assert!(fact(&r, "steps back detected") >= 5);
        // The same run with a guard that only stalls is caught spending past expiry.
        let stalled = fact(&r, "guard alone (stalling): P2 violations")
            + fact(&r, "guard alone (stalling): P3 violations");
        assert!(stalled > 0, "{:?}", r.facts);
        assert!(fact(&r, "admitted") <= fact(&r, "bound over the run (B + R·T)"));
    }
}

#[test]
fn rollout_moves_to_the_new_rate() {
    for seed in SEEDS {
        let r = run("rollout", seed);
        let r2 = fact(&r, "new rate r₂ (units/s)");
        let after = fact(&r, "admitted per second after the transition");
        assert!(
            after <= r2 * 11 / 10 && after >= r2 * 8 / 10,
            "{after} vs {r2}"
        );
    }
}

#[test]
fn key_spray_is_aggregated_and_tenants_keep_their_share() {
    for seed in SEEDS {
        let r = run("key-spray", seed);
        assert!(fact(&r, "aggregated into the overflow key") > 0);
        assert!(fact(&r, "tenants' share of their entitlement (%)") >= 95);
    }
}

#[test]
fn zipf_demand_uses_the_bound() {
    let r = run("zipf", 3);
    assert!(fact(&r, "agents") >= 100);
    assert!(
        fact(&r, "utilisation of the bound (%)") >= 85,
        "{:?}",
        r.facts
    );
}

#[test]
fn larger_leases_mean_fewer_requests_and_more_stranded_credit() {
    let r = run("lease-size", 1);
    let col = |name: &str| r.series.column(name).expect("column");
    let (qps, stranded) = (col("region_qps"), col("stranded"));
    let rows = &r.series.rows;
    assert!(rows.len() >= 3);
    for pair in rows.windows(2) {
        assert!(pair[1][qps] < pair[0][qps], "{rows:?}");
        assert!(pair[1][stranded] > pair[0][stranded], "{rows:?}");
    }
}

#[test]
fn fuzzed_fault_schedules_keep_every_promise() {
    for seed in 1..=40 {
        let sim = fuzz::run_case(seed, Scale::Quick, None).expect("valid case");
        let log = sim.promises();
        assert!(log.is_clean(), "seed {seed}: {:?}", log.first_any());
    }
}

#[test]
fn a_seed_replays_bit_for_bit() {
    for name in ["fuzz", "partition"] {
        let (a, b) = (run(name, 11), run(name, 11));
        assert_eq!(to_csv(&a.series), to_csv(&b.series), "{name}");
        assert_eq!(a.promises, b.promises);
        assert_eq!(a.facts, b.facts);
    }
    let a = fuzz::run_case(5, Scale::Quick, None).expect("valid");
    let b = fuzz::run_case(5, Scale::Quick, None).expect("valid");
    assert_eq!(a.records(), b.records());
}

#[test]
fn the_checks_catch_an_agent_that_overspends() {
    let cfg = HierarchyConfig {
        duration_s: 6,
        load_factor_pct: 300,
        zipf_exponent_pct: 0,
        defect: Some(Defect::Overspend { agent: 0 }),
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg).expect("valid");
    sim.run();
    let log = sim.promises();
    assert!(log.count(Promise::NoDoubleSpend) > 0, "{log:?}");
    assert!(log.count(Promise::BudgetBound) > 0, "{log:?}");
}

/// Leases far shorter than the credit they carry (two seconds of demand on a half-second
/// lease), and agent 0 cut off from its region: it cannot renew, so its lease expires with
/// credit in hand.
fn expiry_run(defect: Option<Defect>) -> Hierarchy {
    let cfg = HierarchyConfig {
        duration_s: 10,
        crash_agent_at_s: None,
        zipf_exponent_pct: 0,
        load_factor_pct: 100,
        report_every_ms: 1_000,
        agent_ttl_ms: 500,
        defect,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg).expect("valid");
    let cut = Fault::PartitionAgent {
        agent: 0,
        cut: true,
    };
    sim.schedule(3_000, cut).expect("agent 0 exists");
    sim.run();
    sim
}

#[test]
fn the_checks_catch_an_agent_that_ignores_expiry() {
    let broken = expiry_run(Some(Defect::IgnoreExpiry { agent: 0 })).promises();
    assert!(broken.count(Promise::LeaseExpiry) > 0, "{broken:?}");
    let honest = expiry_run(None).promises();
    assert!(honest.is_clean(), "{honest:?}");
}

#[test]
fn the_same_broken_agent_fails_a_fuzz_case() {
    let defect = Some(Defect::Overspend { agent: 0 });
    let caught = (1..=10).any(|seed| {
        let sim = fuzz::run_case(seed, Scale::Quick, defect).expect("valid");
        !sim.promises().is_clean()
    });
    assert!(caught, "ten fuzz seeds let an overspending agent through");
}

#[test]
fn every_scenario_has_a_unique_name_and_unknown_ones_are_refused() {
    let mut names: Vec<_> = scenario::ALL.iter().map(|s| s.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), scenario::ALL.len());
    let err = scenario::find("nope").err().expect("refused").to_string();
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn faults_and_sizes_out_of_range_are_refused_by_name() {
    let mut sim = Hierarchy::new(HierarchyConfig::default()).expect("valid");
    let crash = Fault::Crash {
        agent: 99,
        kind: leasehold_simulations::hierarchy::CrashKind::JustSpent,
    };
    let err = sim
        .schedule(1_000, crash)
        .expect_err("no agent 99")
        .to_string();
    assert!(err.contains("agent 99"), "{err}");
    let cut = Fault::PartitionRegion {
        region: 5,
        cut: true,
    };
    let err = sim
        .schedule(1_000, cut)
        .expect_err("no region 5")
        .to_string();
    assert!(err.contains("region 5"), "{err}");
    let long = HierarchyConfig {
        duration_s: 601,
        ..HierarchyConfig::default()
    };
    let err = Hierarchy::new(long).err().expect("too long").to_string();
    assert!(err.contains("duration_s") && err.contains("601"), "{err}");
}
