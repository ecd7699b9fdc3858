//! Memory per key: a million distinct users, each charged once on a per-process rule,
//! counted by a global allocator that tracks live bytes, and by the process's resident
//! set. Prints bytes per key for the key table alone (what the million keys added) and
//! for the whole process.
//!
//! `cargo run --release -p leasehold-agent --example key_memory [KEYS] [ALGORITHM]`
//! (ALGORITHM: fixed_window, the default, or token_bucket)

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are noted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let mut args = std::env::args().skip(1);
    let keys: usize = args.next().map_or(1_000_000, |a| a.parse().expect("KEYS"));
    let algorithm = args.next().unwrap_or_else(|| "fixed_window".into());
    let rate = match algorithm.as_str() {
        "token_bucket" => "rate: {units: 1, per: 1h}\nburst: 10\n",
        _ => "algorithm: fixed_window\nrate: {units: 10, per: 1d}\n",
    };
    let policy = Policy::from_yaml(&format!(
        "id: api\ndimensions: [{{name: user, required: true}}]\nscope: process\n{rate}"
    ))
    .expect("policy");
    let engine = Engine::builder()
        .build(RuleSource::from_policies([policy]))
        .expect("engine");
    let users: Vec<String> = (0..keys).map(|i| format!("user-{i:08}")).collect();
    // One decision first: the thread's caches and the rule set are not per key.
    let warm = [("user", "warm")];
    engine.admit(
        &AdmitRequest::new(&[Dimension::policy("api", &warm)]),
        Nanos(0),
    );
    let (heap_before, rss_before) = (LIVE_BYTES.load(Ordering::Relaxed), rss_bytes());
    for (i, user) in users.iter().enumerate() {
        let entries = [("user", user.as_str())];
        let d = engine.admit(
            &AdmitRequest::new(&[Dimension::policy("api", &entries)]),
            Nanos(i as u64),
        );
        assert!(d.allowed, "{user}");
    }
    let (heap_after, rss_after) = (LIVE_BYTES.load(Ordering::Relaxed), rss_bytes());
    let stats = engine.stats();
    assert_eq!(stats.table_full, 0, "every user got a key");
    let held = engine.key_count() - 1;
    println!(
        "{algorithm}: {held} keys (key text 'api' + 'user-NNNNNNNN'), table of {} at most",
        stats.keys_max
    );
    println!(
        "allocated: {:.1} MiB, {} bytes/key",
        (heap_after - heap_before) as f64 / 1048576.0,
        (heap_after - heap_before) / held
    );
    println!(
        "resident: {:.1} MiB more, {} bytes/key",
        (rss_after - rss_before) as f64 / 1048576.0,
        (rss_after - rss_before) / held
    );
}
