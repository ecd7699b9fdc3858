//! What the scenario tests share: running a named scenario at test size, and reading its
//! figures.

use leasehold_simulations::scenario::{self, RunOptions, Scale, ScenarioReport};

/// Runs scenario `name` at test size under `seed` and requires every promise it checks to
/// have held.
pub fn run(name: &str, seed: u64) -> ScenarioReport {
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

/// The numeric figure `name` of `r`.
pub fn fact(r: &ScenarioReport, name: &str) -> u64 {
    r.fact_u64(name)
        .unwrap_or_else(|| panic!("{}: no numeric fact '{name}' in {:?}", r.scenario, r.facts))
}
