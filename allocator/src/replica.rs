//! The door through which services reach replicated state.
//!
//! A [`Machine`] is deterministic state driven by commands that carry the orderer's time. A
//! [`Replica`] orders commands and answers reads: the Raft node does it for a cluster, and
//! [`LocalReplica`] does it in one process (tests, single-node tools). Services are written
//! against [`Replica`], so the same service code runs on either.

use leasehold_common::ledger::{Command, Ledger, LedgerError, Outcome};
use leasehold_common::time::{Clock, Nanos};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// Deterministic replicated state: no clock reads, no I/O, time comes with each command.
pub trait Machine: Serialize + DeserializeOwned + Send + Sync + 'static {
    type Command: Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static;
    type Output: Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static;

    fn apply(&mut self, now: Nanos, command: Self::Command) -> Self::Output;

    /// Reads a snapshot body of an earlier snapshot `format` as `(timeline_ns, machine)`;
    /// None for a format this machine never had.
    fn from_earlier_snapshot(_format: u8, _body: &[u8]) -> Option<Result<(u64, Self), String>> {
        None
    }
}

impl Machine for Ledger {
    type Command = Command;
    type Output = Result<Outcome, LedgerError>;

    fn apply(&mut self, now: Nanos, command: Command) -> Self::Output {
        Ledger::apply(self, now, command)
    }
}

/// Why a command or read did not happen. Nothing was applied in either case unless the
/// variant says the outcome is unknown.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ReplicaError {
    #[error("not the leader; the leader is {}", leader_addr.as_deref().unwrap_or("unknown"))]
    NotLeader {
        leader_id: Option<u64>,
        leader_addr: Option<String>,
    },
    #[error("replication unavailable: {0}")]
    Unavailable(String),
    /// The command may or may not have been applied (e.g. leadership lost after proposing);
    /// a retry with the same request id is safe.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

/// Orders commands for a [`Machine`] and answers linearizable reads.
pub trait Replica<M: Machine>: Clone + Send + Sync + 'static {
    /// Applies `command` at the orderer's time once it is durable on a quorum.
    fn propose(
        &self,
        command: M::Command,
    ) -> impl Future<Output = Result<M::Output, ReplicaError>> + Send;

    /// Runs `f` on state that reflects every command acknowledged before the call.
    fn read<R, F>(&self, f: F) -> impl Future<Output = Result<R, ReplicaError>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&M) -> R + Send + 'static;

    /// Runs `f` on this replica's applied state without confirming it is current (a
    /// follower's may lag): for routing hints that a stale answer cannot make wrong. None
    /// while there is no state yet.
    fn peek<R>(&self, f: impl FnOnce(&M) -> R) -> Option<R>;
}

/// A replica of one: commands apply in call order at the local clock's time.
pub struct LocalReplica<M> {
    state: Arc<Mutex<M>>,
    clock: Arc<dyn Clock>,
}

impl<M> Clone for LocalReplica<M> {
    fn clone(&self) -> Self {
        LocalReplica {
            state: Arc::clone(&self.state),
            clock: Arc::clone(&self.clock),
        }
    }
}

impl<M: Machine> LocalReplica<M> {
    pub fn new(state: M, clock: Arc<dyn Clock>) -> Self {
        LocalReplica {
            state: Arc::new(Mutex::new(state)),
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, M> {
        // A panic inside `apply` leaves no partial command behind (commands are applied
        // whole), so the state is still consistent after poisoning.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<M: Machine> Replica<M> for LocalReplica<M> {
    fn propose(
        &self,
        command: M::Command,
    ) -> impl Future<Output = Result<M::Output, ReplicaError>> + Send {
        let now = self.clock.now();
        let out = self.lock().apply(now, command);
        std::future::ready(Ok(out))
    }

    fn read<R, F>(&self, f: F) -> impl Future<Output = Result<R, ReplicaError>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&M) -> R + Send + 'static,
    {
        let out = f(&self.lock());
        std::future::ready(Ok(out))
    }

    fn peek<R>(&self, f: impl FnOnce(&M) -> R) -> Option<R> {
        Some(f(&self.lock()))
    }
}

/// A replica that becomes available once it is set: services are built before the node
/// they run on has started, and answer "unavailable" until then.
pub struct LateReplica<R> {
    cell: Arc<std::sync::OnceLock<R>>,
}

impl<R> Clone for LateReplica<R> {
    fn clone(&self) -> Self {
        LateReplica {
            cell: Arc::clone(&self.cell),
        }
    }
}

impl<R> Default for LateReplica<R> {
    fn default() -> Self {
        LateReplica {
            cell: Arc::new(std::sync::OnceLock::new()),
        }
    }
}

impl<R> LateReplica<R> {
    /// Sets the replica; a second call is ignored.
    pub fn set(&self, replica: R) {
        let _ = self.cell.set(replica);
    }

    pub fn get(&self) -> Option<&R> {
        self.cell.get()
    }
}

fn starting() -> ReplicaError {
    ReplicaError::Unavailable("node is starting".into())
}

impl<M: Machine, R: Replica<M>> Replica<M> for LateReplica<R> {
    fn propose(
        &self,
        command: M::Command,
    ) -> impl Future<Output = Result<M::Output, ReplicaError>> + Send {
        let inner = self.cell.get().cloned();
        async move {
            match inner {
                Some(r) => r.propose(command).await,
                None => Err(starting()),
            }
        }
    }

    fn read<T, F>(&self, f: F) -> impl Future<Output = Result<T, ReplicaError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&M) -> T + Send + 'static,
    {
        let inner = self.cell.get().cloned();
        async move {
            match inner {
                Some(r) => r.read(f).await,
                None => Err(starting()),
            }
        }
    }

    fn peek<T>(&self, f: impl FnOnce(&M) -> T) -> Option<T> {
        self.cell.get()?.peek(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_common::ledger::LedgerConfig;
    use leasehold_common::time::ManualClock;

    #[tokio::test]
    async fn local_replica_applies_at_clock_time() {
        let clock = ManualClock::new(Nanos(5));
        let replica = LocalReplica::new(
            Ledger::new(LedgerConfig::root("g")),
            Arc::new(clock.clone()),
        );
        replica.propose(Command::Tick).await.unwrap().unwrap();
        clock.set(Nanos(3));
        replica.propose(Command::Tick).await.unwrap().unwrap();
        let (now, rollbacks) = replica
            .read(|l| (l.now(), l.clock_rollbacks().rollbacks))
            .await
            .unwrap();
        assert_eq!((now, rollbacks), (Nanos(5), 1));
    }
}
