//! Admission on one thread, the engine's `admit_into` and governor's keyed check timed
//! back to back on the same thread, round after round on fresh threads: on a machine
//! whose speed drifts, the ratio within a round is steadier than either time alone.
//!
//! Three cases: one leased key against one governor key; the same refused (an empty credit
//! slot against a governor key whose one request an hour is spent); and three dimensions
//! (the leased key, a token bucket and a GCRA limiter, all or none) against three governor
//! keys.
//!
//! `cargo run --release -p leasehold-agent --example admit_vs_governor [ROUNDS]`

#[path = "../benches/admit/setup.rs"]
mod setup;

use governor::{Quota, RateLimiter};
use leasehold_agent::engine::{AdmitRequest, Decision, Dimension, Engine};
use leasehold_common::time::Nanos;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

const CHECKS: u64 = 3_000_000;

/// Nanoseconds per check of the engine on `dims` and of governor on `keys` (with `quota`),
/// on the calling thread.
fn round(
    engine: &Engine,
    dims: &[Dimension<'_>],
    keys: &[&'static str],
    quota: Quota,
) -> (f64, f64) {
    let req = AdmitRequest::new(dims);
    let mut decision = Decision::new();
    for i in 0..CHECKS / 10 {
        engine.admit_into(&req, Nanos(i), &mut decision);
    }
    let start = Instant::now();
    for i in 0..CHECKS {
        engine.admit_into(&req, Nanos(i), &mut decision);
        black_box(decision.allowed);
    }
    let ours = start.elapsed().as_nanos() as f64 / CHECKS as f64;
    let limiter = RateLimiter::<&str, _, _>::keyed(quota);
    for k in keys {
        // Spends a one-an-hour quota's only request, so that the timed checks refuse.
        let _ = limiter.check_key(k);
    }
    let start = Instant::now();
    for _ in 0..CHECKS {
        black_box(keys.iter().all(|k| limiter.check_key(k).is_ok()));
    }
    let theirs = start.elapsed().as_nanos() as f64 / CHECKS as f64;
    (ours, theirs)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(12, |r| r.parse().expect("ROUNDS is a number"));
    let plenty = setup::engine(setup::SHARE);
    let empty = setup::engine(0);
    let big = Quota::per_second(NonZeroU32::new(u32::MAX).expect("non-zero"));
    let tiny = Quota::per_hour(NonZeroU32::new(1).expect("non-zero"));
    let acme = [("tenant", "acme")];
    let one = [Dimension::policy("leased", &acme)];
    let three = [
        Dimension::policy("leased", &acme),
        Dimension::policy("tenant", &acme),
        Dimension::policy("route", &acme),
    ];
    type Case<'a> = (
        &'a str,
        &'a Engine,
        &'a [Dimension<'a>],
        &'a [&'static str],
        Quota,
    );
    let cases: [Case<'_>; 3] = [
        ("one key", &plenty, &one, &["acme"], big),
        ("one key refused", &empty, &one, &["acme"], tiny),
        (
            "three keys",
            &plenty,
            &three,
            &["leased:acme", "tenant:acme", "route:acme"],
            big,
        ),
    ];
    for (name, engine, dims, keys, quota) in cases {
        let mut results = Vec::new();
        for _ in 0..rounds {
            let (ours, theirs) =
                std::thread::scope(|s| s.spawn(|| round(engine, dims, keys, quota)).join())
                    .expect("round thread");
            println!(
                "{name}: engine {ours:.1} ns, governor {theirs:.1} ns, ratio {:.2}",
                ours / theirs
            );
            results.push((ours, theirs));
        }
        let ours = median(results.iter().map(|r| r.0).collect());
        let theirs = median(results.iter().map(|r| r.1).collect());
        let ratio = median(results.iter().map(|r| r.0 / r.1).collect());
        println!("{name}, median: engine {ours:.1} ns, governor {theirs:.1} ns, ratio {ratio:.2}");
    }
}
