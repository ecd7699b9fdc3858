//! The chaos suite's short seed on the real binaries: a 3-node mutual-TLS root cluster, a
//! 3-node region cluster leasing from it, five agents (two leasing from the region; state
//! files on every other one, one in its own network namespace when running as root, one
//! agent and one root node under libfaketime when installed), traffic above the rate, and
//! about ten seeded faults (leader and follower SIGKILL, leader SIGSTOP, quorum loss, the
//! region's leader and followers killed or stopped, agent SIGKILL and SIGSTOP, partitions,
//! clock steps of an agent and of a node). No window of any key exceeds `B + r·T`, every
//! node of each cluster ends with the same ledger, each ledger accounts for every unit
//! admitted below it, and the usage each cluster's replicated state booked through every
//! failover matches its ledger.

mod chaos_support;

use leasehold_simulations::chaos::run::{run_chaos, ChaosConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_short_seed_keeps_the_bound_and_the_ledgers_through_every_fault() {
    let bins = chaos_support::binaries();
    let cfg = ChaosConfig {
        seed: 3,
        duration_s: 35,
        ..ChaosConfig::default()
    };
    let report = run_chaos(&bins, &cfg, |f| {
        eprintln!(
            "{:>6} ms {:?}: held {} ms, stall {} ms",
            f.at_ms, f.fault, f.hold_ms, f.stall_ms
        );
    })
    .await
    .expect("the chaos run completes");
    for why in &report.skipped {
        eprintln!("skipped: {why}");
    }
    let v = &report.verdict;
    eprintln!("{v:?}");
    assert!(report.faults.len() >= 5, "{:?}", report.faults);
    assert!(v.counts.admitted > 1_000, "{:?}", v.counts);
    assert!(
        v.counts.denied > 0,
        "traffic above the rate: {:?}",
        v.counts
    );
    assert_eq!(v.violations, 0, "windows over B + r·T: {:?}", v.windows);
    assert!(v.ledgers_identical, "{:?}", v.ledgers);
    assert!(
        v.conserved,
        "admitted {} vs {:?}",
        v.counts.admitted, v.ledgers
    );
    assert!(
        v.usage_matches,
        "usage {:?} against ledgers {:?}",
        v.usage, v.ledgers
    );
    let region = v.region.as_ref().expect("the run has a region");
    assert!(region.admitted > 0, "{region:?}");
    assert!(region.ledgers_identical, "{region:?}");
    assert!(region.conserved, "{region:?}");
    assert!(region.usage_matches, "{region:?}");
    assert!(
        report
            .faults
            .iter()
            .any(|f| format!("{:?}", f.fault).starts_with("Region")),
        "{:?}",
        report.faults
    );
    assert!(v.passed);
}
