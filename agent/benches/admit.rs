//! Admission hot path: one leased key, the deny path and three dimensions, on one and two
//! threads; beside the `governor` crate's keyed limiter on the same workload.
//!
//! `cargo bench -p leasehold-agent --bench admit` (add `-- --quick` for a short run).

#[path = "admit/setup.rs"]
mod setup;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::{Quota, RateLimiter};
use leasehold_agent::engine::{AdmitRequest, Decision, Dimension, Engine};
use leasehold_common::time::Nanos;
use setup::engine;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

const ONE: [Dimension<'static>; 1] = [Dimension {
    target: leasehold_agent::engine::Target::Policy("leased"),
    entries: &[("tenant", "acme")],
}];

const THREE: [Dimension<'static>; 3] = [
    ONE[0],
    Dimension {
        target: leasehold_agent::engine::Target::Policy("tenant"),
        entries: &[("tenant", "acme")],
    },
    Dimension {
        target: leasehold_agent::engine::Target::Policy("route"),
        entries: &[("tenant", "acme")],
    },
];

/// Runs `iters` calls of `f` split over `threads` threads, each call given a time no
/// earlier than its thread's last; returns the wall time.
fn spread(threads: u64, iters: u64, f: &(dyn Fn(u64) + Sync)) -> Duration {
    spread_with::<()>(threads, iters, &|i, _| f(i))
}

/// [`spread`] with one `S` per thread (e.g. a decision), reused for every call.
fn spread_with<S: Default>(threads: u64, iters: u64, f: &(dyn Fn(u64, &mut S) + Sync)) -> Duration {
    let base = setup::reserve_ns(threads * iters);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut state = S::default();
                for i in 0..iters / threads {
                    f(base + t * iters + i, &mut state);
                }
            });
        }
    });
    start.elapsed()
}

fn bench_engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    let plenty = engine(setup::SHARE);
    let empty = engine(0);
    for threads in [1u64, 2] {
        let cases: [(&str, &Engine, &[Dimension<'_>]); 3] = [
            ("admit_leased", &plenty, &ONE),
            ("deny_leased", &empty, &ONE),
            ("admit_3_dimensions", &plenty, &THREE),
        ];
        for (name, e, dims) in cases {
            let req = AdmitRequest::new(dims);
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| {
                    spread(threads, iters, &|i| {
                        // By reference: passing the value itself would copy the whole
                        // decision again, which no caller does.
                        let decision = e.admit(&req, Nanos(i));
                        black_box(&decision);
                    })
                })
            });
            // The same with a decision each thread keeps (`admit_into`).
            let into = format!("{name}_into");
            group.bench_function(BenchmarkId::new(into, threads), |b| {
                b.iter_custom(|iters| {
                    spread_with(threads, iters, &|i, d: &mut Decision| {
                        e.admit_into(&req, Nanos(i), d);
                        black_box(d.allowed);
                    })
                })
            });
        }
    }
    group.finish();
}

fn bench_governor(c: &mut Criterion) {
    let mut group = c.benchmark_group("governor_keyed");
    let big = NonZeroU32::new(u32::MAX).unwrap();
    let plenty = RateLimiter::<&str, _, _>::keyed(Quota::per_second(big));
    let tiny = RateLimiter::<&str, _, _>::keyed(Quota::per_hour(NonZeroU32::new(1).unwrap()));
    let _ = tiny.check_key(&"acme");
    for threads in [1u64, 2] {
        group.bench_function(BenchmarkId::new("admit", threads), |b| {
            b.iter_custom(|iters| {
                spread(threads, iters, &|_| {
                    black_box(plenty.check_key(&"acme").is_ok());
                })
            })
        });
        group.bench_function(BenchmarkId::new("deny", threads), |b| {
            b.iter_custom(|iters| {
                spread(threads, iters, &|_| {
                    black_box(tiny.check_key(&"acme").is_ok());
                })
            })
        });
        group.bench_function(BenchmarkId::new("admit_3_keys", threads), |b| {
            b.iter_custom(|iters| {
                spread(threads, iters, &|_| {
                    let ok = ["leased:acme", "tenant:acme", "route:acme"]
                        .iter()
                        .all(|k| plenty.check_key(k).is_ok());
                    black_box(ok);
                })
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(500))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_engine, bench_governor
}
criterion_main!(benches);
