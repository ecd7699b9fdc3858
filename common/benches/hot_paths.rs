//! Criterion benchmarks of the accounting hot paths.
use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_common::algo::{Limiter, TokenBucket};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use std::hint::black_box;

fn bucket_take(c: &mut Criterion) {
    let rate = Rate::per_second(1_000_000_000).expect("positive rate");
    let mut bucket = TokenBucket::full(rate, 1_000_000, Nanos(0));
    let mut now = 0u64;
    c.bench_function("token_bucket_try_take", |b| {
        b.iter(|| {
            now += 1;
            black_box(bucket.try_take(black_box(1), Nanos(now)))
        })
    });
}

criterion_group!(benches, bucket_take);
criterion_main!(benches);
