//! The root's replica, metered: every command proposed to it is counted, sized as the log
//! would carry it (its postcard encoding), and timed while the state machine applies it.

use leasehold_allocator::replica::{LocalReplica, Replica, ReplicaError};
use leasehold_allocator::state::{AllocatorState, StateCommand, StateOutput};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Counts since the start of a run.
#[derive(Debug, Default)]
pub struct Meter {
    /// Commands proposed: one per log entry slot (a `LeaseBatch` is one).
    pub proposals: AtomicU64,
    /// Holder calls applied: each call of a batch counts, as do single calls.
    pub lease_calls: AtomicU64,
    /// `LeaseBatch` commands among the proposals.
    pub batches: AtomicU64,
    /// Bytes of the proposed commands' encoding: what the leader appends and sends to each
    /// follower, before framing.
    pub bytes: AtomicU64,
    /// Wall time spent applying them, in nanoseconds.
    pub apply_ns: AtomicU64,
}

/// The counts at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub proposals: u64,
    pub lease_calls: u64,
    pub batches: u64,
    pub bytes: u64,
    pub apply_ns: u64,
}

impl Meter {
    pub fn counts(&self) -> Counts {
        Counts {
            proposals: self.proposals.load(Relaxed),
            lease_calls: self.lease_calls.load(Relaxed),
            batches: self.batches.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            apply_ns: self.apply_ns.load(Relaxed),
        }
    }
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            proposals: self.proposals - earlier.proposals,
            lease_calls: self.lease_calls - earlier.lease_calls,
            batches: self.batches - earlier.batches,
            bytes: self.bytes - earlier.bytes,
            apply_ns: self.apply_ns - earlier.apply_ns,
        }
    }
}

/// A replica in this process whose proposals are metered.
#[derive(Clone)]
pub struct Metered {
    pub inner: LocalReplica<AllocatorState>,
    pub meter: Arc<Meter>,
}

impl Replica<AllocatorState> for Metered {
    fn propose(
        &self,
        command: StateCommand,
    ) -> impl Future<Output = Result<StateOutput, ReplicaError>> + Send {
        let m = &self.meter;
        let bytes = postcard::to_allocvec(&command).map_or(0, |b| b.len() as u64);
        let calls = match &command {
            StateCommand::LeaseCalls(calls) => {
                m.batches.fetch_add(1, Relaxed);
                calls.len() as u64
            }
            c if c.is_lease_call() => 1,
            _ => 0,
        };
        m.proposals.fetch_add(1, Relaxed);
        m.lease_calls.fetch_add(calls, Relaxed);
        m.bytes.fetch_add(bytes, Relaxed);
        let started = Instant::now();
        // A local replica applies at the call and hands back a ready answer.
        let answer = self.inner.propose(command);
        m.apply_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
        answer
    }

    fn read<R, F>(&self, f: F) -> impl Future<Output = Result<R, ReplicaError>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&AllocatorState) -> R + Send + 'static,
    {
        self.inner.read(f)
    }

    fn peek<R>(&self, f: impl FnOnce(&AllocatorState) -> R) -> Option<R> {
        self.inner.peek(f)
    }
}
