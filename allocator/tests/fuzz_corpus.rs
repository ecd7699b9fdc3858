//! The seed corpus of the state-codec fuzz target (`allocator/fuzz`, target
//! `state_snapshot`) is snapshots this release writes: each committed seed decodes and is
//! exactly what the state it came from encodes to today. A change of the snapshot format
//! fails here, and `LEASEHOLD_WRITE_FUZZ_CORPUS=1 cargo test -p leasehold-allocator --test
//! fuzz_corpus` writes the seeds again, so the fuzzer always starts from current bytes.
//!
//! `tests/snapshots_format2/` keeps the same seeds as the release before usage records
//! wrote them (snapshot format 2): they still load, as the same state this release builds.

use std::path::PathBuf;

use leasehold_allocator::raft::machine::{decode_snapshot, encode_snapshot};
use leasehold_allocator::replica::Machine;
use leasehold_allocator::state::{AllocatorState, StateCommand};
use leasehold_common::ledger::{Acquire, Command, LedgerConfig};
use leasehold_common::time::Nanos;

const POLICIES: &[&str] = &[
    "id: tb\ndimensions: [{name: tenant, lowercase: true}]\nkey: [tenant]\nrate: {units: 100, per: 1s}\nburst: 200\n",
    "id: cq\nalgorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 1000}\n",
    "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
];

fn apply(state: &mut AllocatorState, now: Nanos, command: StateCommand) {
    state.apply(now, command);
}

/// The seeds: an empty state, one with policies, one that also holds leases.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let now = Nanos(1_000_000_000);
    let mut state = AllocatorState::new(LedgerConfig::root("global"));
    let empty = encode_snapshot(&state, 0).expect("encodes");
    for (i, yaml) in POLICIES.iter().enumerate() {
        let command = StateCommand::ApplyPolicy {
            yaml: (*yaml).into(),
            shadow: i == 1,
            effective_at_ns: 0,
            actor: "admin/ops".into(),
        };
        apply(&mut state, now, command);
    }
    let policies = encode_snapshot(&state, now.0).expect("encodes");
    for (request_id, holder) in ["agent-1", "agent-2"].into_iter().enumerate() {
        let acquire = Acquire {
            holder_id: holder.into(),
            policy_id: "tb".into(),
            key: "tenant=acme".into(),
            want_credit: 20,
            demand_milli_per_sec: 5_000,
            request_id: request_id as u64 + 1,
            priority: 0,
        };
        apply(
            &mut state,
            now,
            StateCommand::Ledger(Command::Acquire(acquire)),
        );
    }
    let leases = encode_snapshot(&state, now.0 + 5).expect("encodes");
    vec![("empty", empty), ("policies", policies), ("leases", leases)]
}

#[test]
fn the_seed_corpus_is_what_this_release_writes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/state_snapshot");
    let write = std::env::var_os("LEASEHOLD_WRITE_FUZZ_CORPUS").is_some();
    for (name, bytes) in seeds() {
        decode_snapshot::<AllocatorState>(&bytes).expect("a fresh snapshot decodes");
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).expect("corpus directory");
            std::fs::write(&path, &bytes).expect("seed written");
            continue;
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; write the seeds with LEASEHOLD_WRITE_FUZZ_CORPUS=1",
                path.display()
            )
        });
        assert!(
            committed == bytes,
            "{} is not what this release writes; write the seeds again with \
             LEASEHOLD_WRITE_FUZZ_CORPUS=1",
            path.display()
        );
    }
}

#[test]
fn snapshots_of_the_release_before_usage_records_load_as_the_same_state() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots_format2");
    for (name, bytes) in seeds() {
        let earlier = std::fs::read(dir.join(name)).expect("committed seed");
        assert_eq!(earlier[0], 2, "{name} is a format 2 snapshot");
        let old = decode_snapshot::<AllocatorState>(&earlier)
            .unwrap_or_else(|e| panic!("{name}: an earlier snapshot no longer loads: {e}"));
        let new = decode_snapshot::<AllocatorState>(&bytes).expect("decodes");
        assert_eq!(old.timeline_ns, new.timeline_ns, "{name}");
        assert!(old.machine == new.machine, "{name}: loads as another state");
        assert_eq!(old.machine.usage().rows_len(), 0);
    }
}
