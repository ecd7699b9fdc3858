//! The audit trail and the watch events, both bounded rings with sequence numbers.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// One admin change: who, what, before and after, when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub seq: u64,
    /// Replicated time of the change, in nanoseconds since the UNIX epoch.
    pub at_ns: u64,
    /// The caller's identity as its certificate names it (`admin/ops`).
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: String,
    pub after: String,
    pub reason: String,
}

/// What holders are told on their watch stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    PolicyChanged {
        policy_id: String,
        version: u64,
    },
    Emergency(Emergency),
    LeaseRevoked {
        lease_id: u64,
        holder_id: String,
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub kind: EventKind,
}

/// A policy's emergency switch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Emergency {
    pub policy_id: String,
    pub mode: EmergencyMode,
    pub min_priority: u32,
    pub restricted_rate_milli_per_sec: u64,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EmergencyMode {
    #[default]
    Normal,
    FailOpen,
    Restricted,
}

/// A ring that keeps the newest `max` items, numbered from 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ring<T> {
    items: VecDeque<T>,
    next_seq: u64,
    max: usize,
}

impl<T> Ring<T> {
    pub fn new(max: usize) -> Self {
        Ring {
            items: VecDeque::new(),
            next_seq: 1,
            max: max.max(1),
        }
    }

    /// Appends the item `make(seq)` and returns its sequence number.
    pub fn push(&mut self, make: impl FnOnce(u64) -> T) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.items.len() == self.max {
            self.items.pop_front();
        }
        self.items.push_back(make(seq));
        seq
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.items.iter()
    }

    /// The sequence number the next item will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}
