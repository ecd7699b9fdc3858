//! Admission on one thread, the engine's `admit_into` and governor's keyed check timed
//! in turn on the same thread, a slice of checks each, round after round on fresh
//! threads: on a machine whose speed drifts, the ratio within a round is steadier than
//! either time alone. Each case ends with the medians over its rounds and with each
//! side's lowest round.
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
use std::time::{Duration, Instant};

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

/// Checks of each side per round, timed in slices of [`SLICE`] taken in turn, so that
/// both sides see the machine as it is from one moment to the next.
const SLICE: u64 = 50_000;

/// Nanoseconds per check of the engine on `dims` and of governor on `keys` (with `quota`
/// and `clock`), on the calling thread.
fn round(
    engine: &Engine,
    dims: &[Dimension<'_>],
    keys: &[&'static str],
    (quota, clock): (Quota, GovernorClock),
) -> (f64, f64) {
    match clock {
        GovernorClock::Own => {
            let limiter = Keyed::dashmap_with_clock(quota, QuantaClock::default());
            alternate(engine, dims, keys, &limiter, None)
        }
        GovernorClock::Frozen => {
            let limiter = Keyed::dashmap_with_clock(quota, FakeRelativeClock::default());
            alternate(engine, dims, keys, &limiter, Some(Nanos(1)))
        }
    }
}

/// [`round`] with `limiter`; the engine is handed `fixed` every time, or a time that
/// moves on by a nanosecond a check.
fn alternate<C: Clock>(
    engine: &Engine,
    dims: &[Dimension<'_>],
    keys: &[&'static str],
    limiter: &Keyed<C>,
    fixed: Option<Nanos>,
) -> (f64, f64) {
    let req = AdmitRequest::new(dims);
    let mut decision = Decision::new();
    let mut ours = |checks: u64| {
        let base = setup::reserve_ns(checks);
        let start = Instant::now();
        for i in 0..checks {
            let now = fixed.unwrap_or(Nanos(base + i));
            engine.admit_into(&req, now, &mut decision);
            black_box(decision.allowed);
        }
        start.elapsed()
    };
    let theirs = |checks: u64| {
        let start = Instant::now();
        for _ in 0..checks {
            black_box(keys.iter().all(|k| limiter.check_key(k).is_ok()));
        }
        start.elapsed()
    };
    for k in keys {
        // Puts the key in governor's map before timing; with the one-an-hour quota this
        // also spends its only request, so that the timed checks refuse.
        let _ = limiter.check_key(k);
    }
    ours(CHECKS / 10);
    theirs(CHECKS / 10);
    let (mut engine_time, mut governor_time) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..CHECKS / SLICE {
        engine_time += ours(SLICE);
        governor_time += theirs(SLICE);
    }
    let per_check = |d: Duration| d.as_nanos() as f64 / (CHECKS / SLICE * SLICE) as f64;
    (per_check(engine_time), per_check(governor_time))
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
        // Each side's quickest round: what it costs when nothing else slows the machine.
        let lowest =
            |side: fn(&(f64, f64)) -> f64| results.iter().map(side).fold(f64::INFINITY, f64::min);
        let (ours, theirs) = (lowest(|r| r.0), lowest(|r| r.1));
        println!(
            "{name}, lowest: engine {ours:.1} ns, governor {theirs:.1} ns, ratio {:.2}",
            ours / theirs
        );
    }
}
