//! Shared fixtures for the storage tests: a deterministic test application and store builders.

#![allow(dead_code)]

pub mod mem_kv;
pub mod recording_kv;

use std::collections::BTreeMap;
use std::path::Path;

use leasehold_allocator::raft::{Entry, LogId, NodeAddr, RaftCommand};
use leasehold_allocator::storage::{
    open_sled, Applier, ApplierError, LogStore, SledOptions, StateMachineStore, StorageLimits,
};
use openraft::{CommittedLeaderId, EntryPayload, Membership};
use serde::{Deserialize, Serialize};

/// Per-key counters; each command names a key and adds one to it, remembering the time and index
/// of the last change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterApplier {
    pub counters: BTreeMap<String, Counter>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    pub count: u64,
    pub last_index: u64,
    pub last_time_ns: u64,
}

impl Applier for CounterApplier {
    fn apply(&mut self, log_index: u64, leader_time_ns: u64, payload: &[u8]) -> Vec<u8> {
        let key = String::from_utf8_lossy(payload).into_owned();
        let c = self.counters.entry(key).or_default();
        c.count += 1;
        c.last_index = log_index;
        c.last_time_ns = leader_time_ns;
        c.count.to_be_bytes().to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("counter map encodes")
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), ApplierError> {
        *self = postcard::from_bytes(snapshot).map_err(|e| ApplierError::InvalidSnapshot {
            len_bytes: snapshot.len(),
            reason: e.to_string(),
        })?;
        Ok(())
    }
}

pub fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

pub fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

pub fn command(term: u64, index: u64, key: &str, leader_time_ns: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(RaftCommand {
            payload: key.as_bytes().to_vec(),
            leader_time_ns,
        }),
    }
}

pub fn membership(term: u64, index: u64, voters: &[u64]) -> Entry {
    let nodes: BTreeMap<u64, NodeAddr> = voters
        .iter()
        .map(|id| {
            let addr = NodeAddr {
                addr: format!("127.0.0.1:{}", 7000 + id),
            };
            (*id, addr)
        })
        .collect();
    let set = voters.iter().copied().collect();
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(vec![set], nodes)),
    }
}

/// Small cache so that tests stay light on memory.
pub fn test_options() -> SledOptions {
    SledOptions {
        cache_capacity_bytes: 8 * 1024 * 1024,
        ..SledOptions::default()
    }
}

pub fn open_at(path: &Path) -> (LogStore, StateMachineStore<CounterApplier>) {
    open_sled(
        path,
        &test_options(),
        CounterApplier::default(),
        StorageLimits::default(),
    )
    .expect("storage opens")
}
