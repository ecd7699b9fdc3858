//! A root's load grows with its regions, not with their keys: each region reports on all
//! its keys in one `LeaseBatch` per round, so the commands the root's Raft group orders
//! are bounded by regions × rounds, while the calls inside them follow the keys (each
//! reported once per interval). Small runs of `leasehold-sim root-scale`; the full-size
//! figures are in docs/scaling.md.

use leasehold_simulations::scale::{run, ScaleConfig, ScaleReport};

fn measure(regions: usize, keys: usize) -> ScaleReport {
    let cfg = ScaleConfig {
        regions,
        keys,
        agents: regions * 10,
        seconds: 2,
        warmup_s: 3,
        ..ScaleConfig::default()
    };
    let r = run(&cfg).unwrap();
    eprintln!("{}", serde_json::to_string(&r).unwrap());
    r
}

/// Ticks the root proposes each second (one each 100 ms): its only commands not from a
/// region.
const TICKS_PER_S: f64 = 10.0;

fn check_one(r: &ScaleReport) {
    assert!(r.root_conserved, "the root's books balance");
    // Every key is reported once per interval, and nothing reaches the root but batches.
    let model = r.model_refresh_calls_per_s;
    assert!(
        (r.root_lease_calls_per_s - model).abs() <= model * 0.1,
        "{} calls/s at the root against {model} predicted",
        r.root_lease_calls_per_s
    );
    assert!(
        r.root_commands_per_s <= r.root_batches_per_s + TICKS_PER_S + 1.0,
        "{} commands/s, {} of them batches",
        r.root_commands_per_s,
        r.root_batches_per_s
    );
    assert!(r.root_batches_per_s <= r.model_batches_per_s_max);
    // Credit keeps up with demand through both levels.
    assert!(
        r.admitted_units_per_s >= 0.99 * r.demand_units_per_s,
        "{} admitted of {} demanded",
        r.admitted_units_per_s,
        r.demand_units_per_s
    );
}

#[test]
fn root_commands_follow_regions_and_its_calls_follow_keys() {
    let base = measure(4, 4_000);
    let more_keys = measure(4, 8_000);
    let more_regions = measure(8, 4_000);
    for r in [&base, &more_keys, &more_regions] {
        check_one(r);
    }
    let ratio = |a: f64, b: f64| a / b;
    let calls = ratio(
        more_keys.root_lease_calls_per_s,
        base.root_lease_calls_per_s,
    );
    assert!(
        (1.8..=2.2).contains(&calls),
        "twice the keys: {calls}x the calls"
    );
    let batches = ratio(more_keys.root_batches_per_s, base.root_batches_per_s);
    assert!(batches <= 1.25, "twice the keys: {batches}x the commands");
    let batches = ratio(more_regions.root_batches_per_s, base.root_batches_per_s);
    assert!(batches >= 1.5, "twice the regions: {batches}x the commands");
}

#[test]
fn a_configuration_out_of_bounds_is_refused_naming_it() {
    let cfg = ScaleConfig {
        regions: 0,
        ..ScaleConfig::default()
    };
    let err = run(&cfg).unwrap_err();
    assert!(err.contains("regions: 0"), "{err}");
    let cfg = ScaleConfig {
        agents: 5,
        regions: 10,
        ..ScaleConfig::default()
    };
    assert!(run(&cfg).unwrap_err().contains("agents: 5"));
}
