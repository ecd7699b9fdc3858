//! The live demo end to end: a 3-node global cluster, two regions and their agents on
//! loopback with mutual TLS, driven for a few seconds. Both regions admit, no window of
//! any key exceeds `B + r·T`, and the bound is mostly put to use.

use leasehold_simulations::live::{self, LiveConfig, POLICY_ID};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_hierarchy_admits_in_both_regions_within_the_bound() {
    let cfg = LiveConfig {
        duration_ms: 4_000,
        seed: 7,
        // Two holders per key in each region: each extra holder of a contended key spends
        // time waiting out denials, and the test shares the machine with other work.
        agents_per_region: 2,
        tenants: 2,
        hot_spot_every_ms: 1_500,
        ..LiveConfig::default()
    };
    let mut progress = 0;
    let summary = live::run(&cfg, |_| progress += 1).await.expect("demo runs");
    let json = serde_json::to_value(&summary).unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&json).unwrap());

    let policy = &json["policies"][POLICY_ID];
    let admitted = policy["admitted"].as_u64().unwrap();
    let bound = policy["bound"].as_u64().unwrap();
    assert_eq!(policy["violations"].as_u64(), Some(0), "{policy}");
    assert!(
        policy["windows_checked"].as_u64().unwrap() > 100_000,
        "{policy}"
    );
    assert!(admitted <= bound, "{admitted} > {bound}");
    assert!(policy["stranded"].is_u64(), "{policy}");
    let utilisation = policy["utilisation"].as_f64().unwrap();
    // Utilisation depends on how busy the machine is (0.57–0.84 seen on two shared cores);
    // well under half would mean credit is stuck between the levels.
    assert!(
        utilisation > 0.4 && utilisation <= 1.0,
        "admitted {admitted} of the bound {bound}"
    );
    for region in live::REGIONS {
        let r = &json["levels"]["regions"][region];
        assert!(r["admitted"].as_u64().unwrap() > 0, "{region}: {r}");
        assert!(
            r["rejected"].as_u64().unwrap() > 0,
            "{region} saw load above the rate: {r}"
        );
    }
    let global = &json["levels"]["global"];
    assert_eq!(global["admitted"].as_u64(), Some(admitted));
    // The global cluster granted at least what the agents spent: credit came down the tree.
    let granted = json["levels"]["allocators"]["global"]["granted"]
        .as_u64()
        .unwrap();
    assert!(
        granted >= admitted,
        "granted {granted} < admitted {admitted}"
    );
    assert!(progress >= 3, "progress reported {progress} times");
}
