//! The networked fault scenarios (agent crashes, leader loss, clock steps) at test size, on
//! the production code: every promise of each scenario holds, and each shows what it is
//! for, so a test fails if the behaviour it shows is broken.

mod support;

use support::{fact, run};

/// Each scenario runs at test size under these seeds.
const SEEDS: [u64; 2] = [1, 2];

use leasehold_simulations::scenario::ScenarioReport;

/// Every per-crash fact of run `label`, as its text.
fn crash_lines<'a>(r: &'a ScenarioReport, label: &str) -> Vec<&'a str> {
    let prefix = format!("{label}: crash agent");
    r.facts
        .iter()
        .filter(|f| f.name.starts_with(&prefix))
        .map(|f| f.value.as_str())
        .collect()
}

#[test]
fn crashed_agents_leases_are_settled_at_least_at_what_they_admitted() {
    for seed in SEEDS {
        let r = run("net-crash", seed);
        for label in ["state files", "no state files"] {
            let crashes = fact(&r, &format!("{label}: crashes"));
            assert!(crashes >= 3, "{label}: {crashes} crashes");
            // Both kinds of crash happened, read from the books rather than assumed.
            let unspent = fact(&r, &format!("{label}: crashes holding unspent credit"));
            let spent = fact(
                &r,
                &format!("{label}: crashes right after spending all held (at most 1 unit left)"),
            );
            assert!(unspent >= 1 && spent >= 1, "{label}: {:?}", r.facts);
            assert_eq!(unspent + spent, crashes);
            assert!(fact(&r, &format!("{label}: unspent credit at the crashes")) > 0);
        }
        // With its state file the restarted agent releases its previous leases; without, the
        // grantor writes them off at expiry as stranded.
        let with = crash_lines(&r, "state files");
        assert!(
            with.iter().all(|l| l.contains("released 1 at mark")),
            "{with:?}"
        );
        let without = crash_lines(&r, "no state files");
        assert!(
            without.iter().all(|l| l.contains("released 0")),
            "{without:?}"
        );
        assert!(without.iter().any(|l| l.contains("written off 1")));
        let stranded =
            |label: &str| fact(&r, &format!("{label}: stranded (written off at expiry)"));
        assert!(
            stranded("no state files") > stranded("state files"),
            "{:?}",
            r.facts
        );
    }
}

#[test]
fn a_cluster_elects_a_new_leader_after_each_crash_and_grants_nothing_twice() {
    for seed in SEEDS {
        let r = run("net-leader-loss", seed);
        let crashes = fact(&r, "leader crashes");
        assert!(crashes >= 2, "{:?}", r.facts);
        assert!(fact(&r, "leader crashes with agent calls on the wire") >= 1);
        assert!(fact(&r, "leaders elected") > crashes, "{:?}", r.facts);
        assert_eq!(
            r.fact_value("ledger conserved on every running node"),
            Some("true")
        );
        let per_crash: Vec<_> = r
            .facts
            .iter()
            .filter(|f| f.name.starts_with("crash at"))
            .collect();
        assert_eq!(per_crash.len() as u64, crashes);
        for f in per_crash {
            assert!(
                f.value.contains("next leader node"),
                "{}: {}",
                f.name,
                f.value
            );
            assert!(!f.value.contains(" 0 admitted"), "{}: {}", f.name, f.value);
        }
        // The series names the leader; every allocator it names is one of the three.
        let col = r.series.column("leader_node").expect("leader column");
        assert!(r.series.rows.iter().all(|row| row[col] <= 3));
        assert!(
            r.series.rows.iter().any(|row| row[col] == 0),
            "no leaderless step"
        );
        let admitted = fact(&r, "admitted (charged)");
        assert!(admitted > 0 && admitted <= fact(&r, "B + r·T over the run"));
    }
}

#[test]
fn clock_steps_back_keep_leases_when_only_wall_clocks_step() {
    for seed in SEEDS {
        let r = run("net-clock-rollback", seed);
        let wall = |name: &str| fact(&r, &format!("wall clocks step: {name}"));
        let mono = |name: &str| fact(&r, &format!("monotonic too: {name}"));
        assert_eq!(wall("admissions past expiry + grace"), 0);
        for agent in 0..4 {
            let clamped = format!("agent {agent} engine readings clamped (steps back)");
            assert_eq!(wall(&clamped), 0);
            assert!(mono(&clamped) > 0, "agent {agent}: {:?}", r.facts);
        }
        // The cut-off holder spends its credit only until its lease runs out when its
        // monotonic clock does not step; stalled through a step it spends on past the grace.
        assert!(wall("agent 0 admitted while cut off") > 0);
        assert!(mono("agent 0 admitted while cut off") > wall("agent 0 admitted while cut off"));
        let past = "monotonic too (finding): P3 admissions past expiry + grace";
        assert!(fact(&r, past) > 0, "{:?}", r.facts);
        assert_eq!(
            fact(&r, "monotonic too (finding): P1 windows over B + r·T"),
            0
        );
        // A connected agent whose monotonic clock is 10 s back sees each renewal as already
        // expired: it admits no more than an agent whose clock is right (less at full scale;
        // in the short run the lease it held before the step can last it through).
        assert!(
            mono("agent 3 admitted while back 10 s")
                <= mono("agent 2 (never back then) admitted meanwhile")
        );
    }
}
