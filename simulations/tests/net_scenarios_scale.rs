//! The autoscaling, Zipf, lease-size and rollout scenarios on the networked simulation (the
//! production code), at test size: every promise holds and each scenario shows what it is
//! for.

mod support;

use support::{fact, run};

/// Each scenario runs at test size under these seeds.
const SEEDS: [u64; 2] = [1, 2];

#[test]
fn autoscaling_multiplies_local_buckets_but_not_leased_credit() {
    for seed in SEEDS {
        let r = run("net-autoscaling", seed);
        let bound = fact(&r, "bound for 1 s (B + R)");
        let rate = fact(&r, "rate R (units/s)");
        assert!(fact(&r, "leased: peak units in 1 s") <= bound);
        assert!(fact(&r, "local buckets: peak units in 1 s") > 2 * bound);
        assert!(fact(&r, "local buckets: windows over B + R·T") > 0);
        for n in [2, 4, 6] {
            let leased = fact(&r, &format!("{n} instances: leased units/s"));
            let local = fact(&r, &format!("{n} instances: local buckets units/s"));
            // Local buckets admit about N×R; the leased agents share R.
            assert!(local >= (n - 1) * rate, "{n} instances: {local}");
            assert!(leased <= rate + rate / 10, "{n} instances: {leased}");
            assert!(leased > 0);
            // Leased credit reaches every instance taking traffic.
            assert_eq!(
                fact(&r, &format!("{n} instances: leased agents admitting")),
                n
            );
        }
    }
}

#[test]
fn zipf_demand_uses_the_bound_and_credit_follows_the_hot_spots() {
    for seed in SEEDS {
        let r = run("net-zipf", seed);
        assert!(
            fact(&r, "utilisation of the bound (%)") >= 90,
            "{:?}",
            r.facts
        );
        let agents = fact(&r, "agents");
        let hot = fact(&r, "hottest agents per epoch");
        let even_pct = hot * 100 / agents;
        let epochs: Vec<_> = r
            .facts
            .iter()
            .filter(|f| f.name.ends_with("hottest share of admissions (%)"))
            .collect();
        assert!(epochs.len() >= 3, "{:?}", r.facts);
        for f in epochs {
            let share: u64 = f.value.parse().expect("numeric");
            // An even split would give the hottest their head count's share; they get well
            // over it, wherever the hot spots moved.
            assert!(
                share * 2 >= even_pct * 3,
                "{}: {share}% (even {even_pct}%)",
                f.name
            );
        }
    }
}

#[test]
fn larger_leases_mean_fewer_grantor_calls_and_more_stranded_credit() {
    for seed in SEEDS {
        let r = run("net-lease-size", seed);
        let at = |h: u64, what: &str| fact(&r, &format!("horizon {h} ms: {what}"));
        assert!(at(100, "lease size (units)") < at(1_000, "lease size (units)"));
        assert!(at(100, "grantor calls/s") > 2 * at(1_000, "grantor calls/s"));
        assert!(at(100, "stranded") < at(1_000, "stranded"));
        for h in [100, 500, 1_000] {
            assert!(at(h, "agent crashes") > 0);
            // The model counts one call per lease; holders also report between refreshes.
            assert!(at(h, "grantor calls/s") >= at(h, "model calls/s"));
            assert!(at(h, "admitted/s") > 0);
        }
    }
}

#[test]
fn a_rollout_reaches_every_agent_and_each_version_keeps_its_bound() {
    for seed in SEEDS {
        let r = run("net-rollout", seed);
        assert_eq!(fact(&r, "new version"), 2);
        assert!(fact(&r, "applied at (ms)") >= fact(&r, "sent at (ms)"));
        assert_eq!(
            fact(&r, "agents on the new version at the end"),
            fact(&r, "agents")
        );
        assert_eq!(fact(&r, "old-version leases on the books at the end"), 0);
        for phase in ["before", "transition", "after"] {
            assert!(fact(&r, &format!("{phase}: windows checked")) > 0);
            assert_eq!(fact(&r, &format!("{phase}: windows over the bound")), 0);
        }
        // The new version's fifth of the rate took effect.
        let before = fact(&r, "admitted/s before the rollout (from 1 s)");
        let after = fact(&r, "admitted/s after the transition");
        assert!(after * 3 < before, "before {before}/s, after {after}/s");
        let series = &r.series;
        let on_new = series.column("agents_on_new").expect("column");
        assert_eq!(series.rows.first().map(|row| row[on_new]), Some(0));
        assert_eq!(
            series.rows.last().map(|row| row[on_new]),
            Some(fact(&r, "agents"))
        );
    }
}
