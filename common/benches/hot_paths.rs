//! Criterion benchmarks of the accounting hot paths: one token-bucket decision, and one
//! ledger grant cycle (acquire, report with renewal, release) as a replica applies it.
use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_common::algo::{Limiter, TokenBucket};
use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, Outcome, PolicyParams, Release, Report,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use std::hint::black_box;

fn bucket_take(c: &mut Criterion) {
    let rate = Rate::per_second(1_000_000_000).expect("positive rate");
    let mut bucket = TokenBucket::full(rate, 1_000_000, Nanos(0));
    let mut now = 0u64;
    c.bench_function("token_bucket_try_take_admit", |b| {
        b.iter(|| {
            now += 1;
            black_box(bucket.try_take(black_box(1), Nanos(now)))
        })
    });
    let mut empty = TokenBucket::empty(Rate::per_second(1).expect("rate"), 10, Nanos(0));
    c.bench_function("token_bucket_try_take_deny", |b| {
        b.iter(|| black_box(empty.try_take(black_box(5), Nanos(1))))
    });
}

fn ledger_with_keys(keys: usize) -> Ledger {
    let mut ledger = Ledger::new(LedgerConfig::root("bench"));
    let params = PolicyParams {
        weights: Default::default(),
        window: None,
        owner: Default::default(),
        exact: false,
        policy_id: "p".into(),
        version: 1,
        rate: Rate::per_second(1_000_000).expect("rate"),
        burst: 1_000_000,
        lease: LeaseParams::default(),
    };
    ledger
        .apply(Nanos(0), Command::PutPolicy(params))
        .expect("policy");
    for k in 0..keys {
        let cmd = acquire(&format!("key-{k}"), "warm", 1);
        ledger.apply(Nanos(0), cmd).expect("warm acquire");
    }
    ledger
}

fn acquire(key: &str, holder: &str, request_id: u64) -> Command {
    Command::Acquire(Acquire {
        holder_id: holder.into(),
        policy_id: "p".into(),
        key: key.into(),
        want_credit: 100,
        demand_milli_per_sec: 50_000,
        request_id,
        priority: 0,
    })
}

fn ledger_grant(c: &mut Criterion) {
    let mut ledger = ledger_with_keys(10_000);
    let mut n = 0u64;
    c.bench_function("ledger_acquire_10k_keys_holder_superseding", |b| {
        b.iter(|| {
            n += 1;
            let key = format!("key-{}", n % 10_000);
            black_box(
                ledger
                    .apply(Nanos(n), acquire(&key, "h", n))
                    .expect("acquire"),
            )
        })
    });
    // A steady cycle on a long-lived ledger: acquire, report with renewal, release; time
    // moves 1 ms per cycle and a tick every 1000 cycles writes off and forgets old state.
    let mut ledger = ledger_with_keys(100);
    let mut cycle = 0u64;
    c.bench_function("ledger_grant_report_release_cycle", |b| {
        b.iter(|| {
            cycle += 1;
            let now = Nanos(1_000_000_000 + cycle * 1_000_000);
            let holder = format!("h{}", cycle % 1_000);
            let key = format!("key-{}", cycle % 100);
            let acquire = Command::Acquire(Acquire {
                holder_id: holder.clone(),
                policy_id: "p".into(),
                key,
                want_credit: 100,
                demand_milli_per_sec: 50_000,
                request_id: 3 * cycle,
                priority: 0,
            });
            let Outcome::Granted(g) = ledger.apply(now, acquire).expect("acquire") else {
                panic!("no grant");
            };
            let id = g.lease.lease_id;
            let report = Command::Report(Report {
                holder_id: holder.clone(),
                lease_id: id,
                used: 40,
                return_credit: 0,
                want_credit: 100,
                demand_milli_per_sec: 50_000,
                request_id: 3 * cycle + 1,
                priority: 0,
            });
            ledger.apply(now, report).expect("report");
            let release = Command::Release(Release {
                holder_id: holder,
                lease_id: id,
                final_used: 60,
                request_id: 3 * cycle + 2,
            });
            black_box(ledger.apply(now, release).expect("release"));
            if cycle.is_multiple_of(1_000) {
                ledger.apply(now, Command::Tick).expect("tick");
            }
        })
    });
}

criterion_group!(benches, bucket_take, ledger_grant);
criterion_main!(benches);
