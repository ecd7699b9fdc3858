//! Periodic expiry ticks, proposed by whichever node leads.

use crate::replica::{Replica, ReplicaError};
use crate::state::{AllocatorState, StateCommand};
use leasehold_common::ledger::Command;
use std::future::Future;
use std::time::Duration;

/// Proposes `Tick` every `interval_ms` until `shutdown` completes. On a follower the
/// proposal is refused as not-leader, which is expected and ignored.
pub async fn run_ticker<R: Replica<AllocatorState>>(
    replica: R,
    interval_ms: u64,
    shutdown: impl Future<Output = ()>,
) {
    let mut every = tokio::time::interval(Duration::from_millis(interval_ms.max(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = every.tick() => {
                match replica.propose(StateCommand::Ledger(Command::Tick)).await {
                    Ok(_) | Err(ReplicaError::NotLeader { .. }) => {}
                    Err(e) => tracing::debug!(error = %e, "tick not applied"),
                }
            }
        }
    }
}
