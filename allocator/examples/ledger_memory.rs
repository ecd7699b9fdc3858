//! Memory of the replicated state per key and per lease: N distinct keys acquired by
//! holders spread over H agents, then released and left idle, then forgotten; live heap
//! bytes (a global allocator that counts them) and the snapshot's encoded size at each
//! stage, divided by N.
//!
//! `cargo run --release -p leasehold-allocator --example ledger_memory [KEYS] [HOLDERS]`

use leasehold_allocator::replica::Machine;
use leasehold_allocator::state::{AllocatorState, StateCommand};
use leasehold_common::ledger::{Acquire, Command, LedgerConfig, LedgerLimits, Outcome, Release};
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

const POLICY: &str = "id: api\ndimensions: [{name: tenant, required: true}]\nscope: global\n\
                      rate: {units: 1000, per: 1s}\nburst: 1000\n";

fn main() {
    let mut args = std::env::args().skip(1);
    let keys: u64 = args.next().map_or(200_000, |a| a.parse().expect("KEYS"));
    let holders: u64 = args.next().map_or(100, |a| a.parse().expect("HOLDERS"));
    let limits = LedgerLimits {
        keys_max: usize::try_from(keys).expect("KEYS fits") + 1,
        leases_max: usize::try_from(keys).expect("KEYS fits") * 2 + 1,
        ..LedgerLimits::default()
    };
    let mut state = AllocatorState::new(LedgerConfig {
        limits,
        ..LedgerConfig::root("global")
    });
    let at = |s: u64| Nanos(s * 1_000_000_000);
    state.apply(
        at(1),
        StateCommand::ApplyPolicy {
            yaml: POLICY.into(),
            shadow: false,
            effective_at_ns: 0,
            actor: "bench".into(),
        },
    );
    println!(
        "sizes: Account {} B, HolderSlot {} B, LeaseRecord {} B, Lease {} B, Tombstone {} B, Outcome {} B",
        std::mem::size_of::<leasehold_common::ledger::Account>(),
        std::mem::size_of::<leasehold_common::ledger::HolderSlot>(),
        std::mem::size_of::<leasehold_common::ledger::LeaseRecord>(),
        std::mem::size_of::<leasehold_common::lease::Lease>(),
        std::mem::size_of::<leasehold_common::ledger::Tombstone>(),
        std::mem::size_of::<Outcome>(),
    );
    let base = LIVE_BYTES.load(Ordering::Relaxed);
    let base_snapshot = snapshot_len(&state);
    let mut leases = Vec::with_capacity(keys as usize);
    for i in 0..keys {
        let out = state.apply(
            at(2),
            StateCommand::Ledger(Command::Acquire(Acquire {
                holder_id: format!("agent-{:04}", i % holders),
                policy_id: "api".into(),
                key: format!("tenant-{i:08}"),
                want_credit: 10,
                demand_milli_per_sec: 1_000,
                request_id: i + 1,
                priority: 0,
            })),
        );
        match ledger_outcome(out) {
            Outcome::Granted(g) => leases.push((g.lease.holder_id.clone(), g.lease.lease_id)),
            other => panic!("acquire {i} not granted: {other:?}"),
        }
    }
    report(
        "held (key + holder + lease)",
        keys,
        base,
        base_snapshot,
        &state,
    );
    for (n, (holder_id, lease_id)) in leases.into_iter().enumerate() {
        let out = state.apply(
            at(3),
            StateCommand::Ledger(Command::Release(Release {
                holder_id,
                lease_id,
                final_used: 1,
                request_id: keys + n as u64 + 1,
            })),
        );
        assert!(matches!(ledger_outcome(out), Outcome::Released { .. }));
    }
    report(
        "released (idle key + tombstone)",
        keys,
        base,
        base_snapshot,
        &state,
    );
    // One tick past the tombstones' lifetime: they go, and the scan drops at most 256 keys.
    state.apply(at(130), StateCommand::Ledger(Command::Tick));
    report("idle, tombstones gone", keys, base, base_snapshot, &state);
    // Past the tombstones' lifetime, with the buckets full again: ticks enough for the
    // idle scan (256 keys a tick) to pass over every key once.
    let ticks = keys / 256 + 2;
    for t in 0..ticks {
        state.apply(Nanos(at(600).0 + t), StateCommand::Ledger(Command::Tick));
    }
    report(
        "idle keys dropped, 10 minutes later",
        keys,
        base,
        base_snapshot,
        &state,
    );
}

fn ledger_outcome(out: leasehold_allocator::state::StateOutput) -> Outcome {
    match out {
        leasehold_allocator::state::StateOutput::Ledger(Ok(o)) => o,
        other => panic!("unexpected output {other:?}"),
    }
}

fn snapshot_len(state: &AllocatorState) -> usize {
    postcard::to_allocvec(state).expect("encodes").len()
}

fn report(stage: &str, keys: u64, base: usize, base_snapshot: usize, state: &AllocatorState) {
    let live = LIVE_BYTES.load(Ordering::Relaxed).saturating_sub(base);
    let snap = snapshot_len(state).saturating_sub(base_snapshot);
    println!(
        "{stage}: keys in ledger {}, leases {}; heap {:.1} MiB, {} bytes/key; snapshot {:.1} MiB, {} bytes/key",
        state.ledger().accounts().count(),
        state.ledger().leases().count(),
        live as f64 / 1_048_576.0,
        live as u64 / keys,
        snap as f64 / 1_048_576.0,
        snap as u64 / keys,
    );
}
