//! A policy rollout under traffic on the networked simulation: mid-run a new version of the
//! policy is applied through the allocator's admin service over the simulated network (as
//! `leasectl policy apply` does), reaches the agents over their watch streams, and they move
//! onto replacement leases; P1 is checked per version around it (see `docs/simulations.md`).

use leasehold_simulations::net::rollout::check_rollout;
use leasehold_simulations::net::{run, NetConfig, NetReport, RolloutSpec};

/// A rollout at 4 s to a fifth of the rate (100 → 20 units/s) and of the burst (200 → 40).
fn lower(cfg: NetConfig) -> NetConfig {
    NetConfig {
        rollout: Some(RolloutSpec {
            at_ms: 4_000,
            rate_per_s: 20,
            burst: 40,
        }),
        ..cfg
    }
}

fn assert_rollout_held(seed: u64, r: &NetReport, agents: usize) {
    let ro = r.rollout.as_ref().expect("the run has a rollout");
    assert!(ro.log.applied_ns.is_some(), "seed {seed}: never applied");
    assert_eq!(ro.log.version, 2, "seed {seed}: the new version's number");
    assert!(
        ro.out_of_reach.is_empty(),
        "seed {seed}: {:?}",
        ro.out_of_reach
    );
    assert_eq!(
        ro.final_versions,
        vec![2; agents],
        "seed {seed}: every agent ends on the new version"
    );
    assert!(
        ro.books_versions.keys().all(|&v| v == 2),
        "seed {seed}: a lease of the old version is still on the books: {:?}",
        ro.books_versions
    );
    assert_eq!(ro.check.violations(), 0, "seed {seed}: {:?}", ro.check);
    assert!(r.ledger_conserved, "seed {seed}: ledger out of balance");
    assert!(
        r.passed(),
        "seed {seed}: bound {:?} expiry {:?} miscounts {:?} settlements {:?}",
        r.bound,
        r.expiry,
        r.miscounts,
        r.settlements
    );
    // The check means something: windows on both sides, and traffic after the switch.
    assert!(ro.check.before.windows > 0 && ro.check.after.windows > 0);
    let after = r
        .admissions
        .iter()
        .filter(|a| a.at_ns >= ro.check.transition_end_ns)
        .count();
    assert!(
        after > 0,
        "seed {seed}: nothing admitted under the new version"
    );
}

#[test]
fn a_lower_rate_reaches_every_agent_its_bound_holds_and_the_run_replays() {
    // Seed 2 crashes every agent after the rollout; each restarts on the first version
    // (its configuration) and must learn the new one from its watch stream again.
    let cfg = lower(NetConfig::quick());
    let seed = 2;
    let first = run(seed, &cfg).unwrap();
    assert_rollout_held(seed, &first, cfg.agents);
    let again = run(seed, &cfg).unwrap();
    assert_eq!(
        first.admissions, again.admissions,
        "seed {seed}: admissions"
    );
    assert_eq!(first.rollout, again.rollout, "seed {seed}: the rollout");
    // An agent that went 1 → 2 → 1 → 2 restarted after the rollout and learnt it again.
    let versions = first.rollout.as_ref().unwrap().log.agent_versions.iter();
    assert!(
        versions.filter(|c| c.len() > 2).count() > 0,
        "seed {seed}: no agent restarted after the rollout"
    );

    // The same seed without the rollout: agents that kept the old policy admit far more
    // than the new bound allows once the transition is over, so the check above would fail
    // if the new version did not take effect.
    let kept_old = run(
        seed,
        &NetConfig {
            rollout: None,
            ..cfg.clone()
        },
    )
    .unwrap();
    let phases = first.rollout.as_ref().unwrap().phases;
    let c = check_rollout(&kept_old.admissions, &phases);
    assert_eq!(c.before.violations, 0);
    assert!(c.after.violations > 0, "the old policy kept: {c:?}");
}

#[test]
fn a_rollout_through_a_leader_crash_reaches_the_new_leader() {
    // The leader crashes just before the rollout: the admin host's calls are refused or
    // time out until another node leads, then the new leader applies it.
    let cfg = lower(NetConfig {
        faults: 0,
        leader_crash_at_ms: Some(3_900),
        ..NetConfig::quick_cluster()
    });
    let seed = 1;
    let r = run(seed, &cfg).unwrap();
    assert_rollout_held(seed, &r, cfg.agents);
    let ro = r.rollout.as_ref().unwrap();
    assert!(
        ro.log.attempts > 1,
        "the first call found a leader: {:?}",
        ro.log
    );
    let crashed = r.leader_crashes();
    assert_eq!(crashed.len(), 1);
    assert!(
        r.leaders.iter().any(|l| l.node != crashed[0].1),
        "no other node led: {:?}",
        r.leaders
    );
}
