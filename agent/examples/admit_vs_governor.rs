//! Admission on one thread, the engine's `admit_into` and governor's keyed check timed
//! back to back on the same thread, round after round on fresh threads: on a machine
//! whose speed drifts, the ratio within a round is steadier than either time alone.
//!
//! Cases: one leased key against one governor key; the same refused (an empty credit slot
//! against a governor key whose one request an hour is spent); and three dimensions (the
//! leased key, a token bucket and a GCRA limiter, all or none) against three governor keys.
//! governor's check reads its own clock where the engine is handed the time, so every
//! case is also timed with governor on a clock that never moves (reading it is one load),
//! the engine then being handed one unchanging time as well.
//!
//! `cargo run --release -p leasehold-agent --example admit_vs_governor [ROUNDS]`

#[path = "../benches/admit/setup.rs"]
mod setup;

use governor::clock::{Clock, FakeRelativeClock, QuantaClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use leasehold_agent::engine::{AdmitRequest, Decision, Dimension, Engine};
use leasehold_common::time::Nanos;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

const CHECKS: u64 = 3_000_000;

/// governor's keyed limiter (its default store) on clock `C`.
type Keyed<C> = RateLimiter<
    &'static str,
    DashMapStateStore<&'static str>,
    C,
    NoOpMiddleware<<C as Clock>::Instant>,
>;

/// The clock governor reads on every check.
#[derive(Copy, Clone)]
enum GovernorClock {
    /// Its default clock (TSC-based).
    Own,
    /// A clock that never moves.
    Frozen,
}

/// Nanoseconds per check of the engine on `dims` and of governor on `keys` (with `quota`
/// and `clock`), on the calling thread.
fn round(
    engine: &Engine,
    dims: &[Dimension<'_>],
    keys: &[&'static str],
    (quota, clock): (Quota, GovernorClock),
) -> (f64, f64) {
    let req = AdmitRequest::new(dims);
    let mut decision = Decision::new();
    let frozen = matches!(clock, GovernorClock::Frozen);
    let at = |i: u64| Nanos(if frozen { 1 } else { i });
    for i in 0..CHECKS / 10 {
        engine.admit_into(&req, at(i), &mut decision);
    }
    let start = Instant::now();
    for i in 0..CHECKS {
        engine.admit_into(&req, at(i), &mut decision);
        black_box(decision.allowed);
    }
    let ours = start.elapsed().as_nanos() as f64 / CHECKS as f64;
    let theirs = match clock {
        GovernorClock::Own => time_governor(
            Keyed::dashmap_with_clock(quota, QuantaClock::default()),
            keys,
        ),
        GovernorClock::Frozen => time_governor(
            Keyed::dashmap_with_clock(quota, FakeRelativeClock::default()),
            keys,
        ),
    };
    (ours, theirs)
}

/// Nanoseconds per check of `limiter` on `keys`.
fn time_governor<C: Clock>(limiter: Keyed<C>, keys: &[&'static str]) -> f64 {
    for k in keys {
        // Puts the key in governor's map before timing; with the one-an-hour quota this
        // also spends its only request, so that the timed checks refuse.
        let _ = limiter.check_key(k);
    }
    let start = Instant::now();
    for _ in 0..CHECKS {
        black_box(keys.iter().all(|k| limiter.check_key(k).is_ok()));
    }
    start.elapsed().as_nanos() as f64 / CHECKS as f64
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
    // Its own: handed one time, an engine used on a moving clock would see it go back.
    let still = setup::engine(setup::SHARE);
    let still_empty = setup::engine(0);
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
        (Quota, GovernorClock),
    );
    let three_keys = ["leased:acme", "tenant:acme", "route:acme"];
    let (own, frozen) = (GovernorClock::Own, GovernorClock::Frozen);
    let cases: [Case<'_>; 6] = [
        ("one key", &plenty, &one, &["acme"], (big, own)),
        ("one key refused", &empty, &one, &["acme"], (tiny, own)),
        ("three keys", &plenty, &three, &three_keys, (big, own)),
        (
            "one key, time frozen",
            &still,
            &one,
            &["acme"],
            (big, frozen),
        ),
        (
            "one key refused, time frozen",
            &still_empty,
            &one,
            &["acme"],
            (tiny, frozen),
        ),
        (
            "three keys, time frozen",
            &still,
            &three,
            &three_keys,
            (big, frozen),
        ),
    ];
    for (name, engine, dims, keys, governor) in cases {
        let mut results = Vec::new();
        for _ in 0..rounds {
            let (ours, theirs) =
                std::thread::scope(|s| s.spawn(|| round(engine, dims, keys, governor)).join())
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
