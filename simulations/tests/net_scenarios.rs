//! The named scenarios on the networked simulation (the production code), at test size:
//! every promise holds and each scenario shows what it is for.

mod support;

use support::{fact, run};

/// Each scenario runs at test size under these seeds.
const SEEDS: [u64; 2] = [1, 2];

#[test]
fn partitions_keep_the_bound_and_count_uncharged_admissions_apart() {
    for seed in SEEDS {
        let r = run("net-partition", seed);
        // Once their leases are gone, the cut-off agents admit uncharged only where the policy
        // says so: fail_open everything, restricted its critical share at the emergency rate.
        let uncharged = |mode: &str| fact(&r, &format!("{mode}: admitted uncharged"));
        assert_eq!(uncharged("fail_closed"), 0);
        assert_eq!(uncharged("cached_lease"), 0);
        assert!(
            uncharged("fail_open") > uncharged("restricted"),
            "{:?}",
            r.facts
        );
        assert!(uncharged("restricted") > 0);
        // fail_closed stops spending held credit once it finds the grantor unreachable;
        // cached_lease spends it until the lease runs out.
        let cut = |mode: &str| {
            fact(
                &r,
                &format!("{mode}: charged admissions of the cut-off agents while cut off"),
            )
        };
        assert!(
            cut("cached_lease") > cut("fail_closed") + 10,
            "{:?}",
            r.facts
        );
        assert_eq!(cut("fail_closed"), cut("restricted"));
        // Charged admissions never exceed B + r·T over the run, whatever the behaviour.
        for mode in ["fail_closed", "cached_lease", "fail_open", "restricted"] {
            let admitted = fact(&r, &format!("{mode}: admitted (charged)"));
            assert!(admitted <= fact(&r, &format!("{mode}: B + r·T over the run")));
            assert!(admitted > 0);
        }
    }
}

#[test]
fn sprayed_keys_stay_within_every_cap_and_the_tenant_keeps_its_budget() {
    for seed in SEEDS {
        let r = run("net-key-spray", seed);
        // The attacker's tenants fill the agent's table and then go to the overflow key; the
        // ledger fills to its cap and no further.
        assert!(fact(&r, "sprayed requests (fresh tenants)") > 5_000);
        assert_eq!(
            fact(&r, "agent key table: most keys held"),
            fact(&r, "agent key table: cap")
        );
        assert!(
            fact(&r, "sent to the overflow key (table full)")
                > fact(&r, "sprayed requests (fresh tenants)") / 2
        );
        assert_eq!(
            fact(&r, "allocator ledger: most keys held"),
            fact(&r, "allocator ledger: key cap")
        );
        // The established tenant still gets nearly all of B + r·T.
        assert!(
            fact(&r, "acme: admitted of its B + r·T (%)") >= 90,
            "{:?}",
            r.facts
        );
    }
}
