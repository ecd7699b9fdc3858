//! Failover on the real binaries: the leader of a 3-node mutual-TLS cluster is killed with
//! SIGKILL three times. A write commits on a new leader each time, and a holder whose lease
//! and refresh horizon cover the election never stops admitting. The measured figures
//! (about 0.35 s median, at most 0.51 s over 90 kills, on a 2-core machine) are in
//! docs/operations.md; the bound here is loose on purpose, for slower machines.

mod chaos_support;

use leasehold_simulations::chaos::failover::{run_failover, FailoverConfig};

/// Far above the 0.32–0.51 s measured, and still far below the holder's 15 s lease.
const FAILOVER_BOUND_MS: u64 = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_and_a_covered_holder_keeps_admitting() {
    let bins = chaos_support::binaries();
    let cfg = FailoverConfig {
        kills: 3,
        seed: 11,
        raft_yaml: None,
        work_dir: None,
    };
    let report = run_failover(&bins, &cfg, |k| {
        eprintln!(
            "kill {}: global-{}, a write committed after {} ms",
            k.index, k.leader, k.served_ms
        );
    })
    .await
    .expect("failover runs");
    eprintln!("{report:?}");
    assert_eq!(report.samples_ms.len(), 3, "every kill found a leader");
    assert!(
        report.samples_ms.iter().all(|&ms| ms < FAILOVER_BOUND_MS),
        "{:?}",
        report.samples_ms
    );
    assert!(report.holder.admitted > 100, "{:?}", report.holder);
    assert_eq!(
        report.holder_denied_during_kills, 0,
        "a holder with a 3 s horizon and a 15 s lease is never short: {report:?}"
    );
}
