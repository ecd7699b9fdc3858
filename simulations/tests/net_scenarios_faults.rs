//! The networked fault scenarios (agent crashes, leader loss, clock steps) at test size, on
//! the production code: every promise of each scenario holds, and each shows what it is
//! for, so a test fails if the behaviour it shows is broken.

use leasehold_simulations::scenario::{self, RunOptions, Scale, ScenarioReport};

fn run(name: &str, seed: u64) -> ScenarioReport {
    let opts = RunOptions {
        seed,
        scale: Scale::Quick,
    };
    let report = (scenario::find(name).expect("known").run)(&opts).expect("runs");
    assert!(
        report.passed(),
        "{name} seed {seed}: {:?}",
        report.promises.kept()
    );
    report
}

fn fact(r: &ScenarioReport, name: &str) -> u64 {
    r.fact_u64(name)
        .unwrap_or_else(|| panic!("{}: no numeric fact '{name}' in {:?}", r.scenario, r.facts))
}

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
    let r = run("net-crash", 1);
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
    let stranded = |label: &str| fact(&r, &format!("{label}: stranded (written off at expiry)"));
    assert!(
        stranded("no state files") > stranded("state files"),
        "{:?}",
        r.facts
    );
}
