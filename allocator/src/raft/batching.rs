//! The proposer: turns queued commands into batched, time-stamped log entries.
//!
//! One task drains the proposal queue. Commands that are waiting together (up to
//! `batch_commands_max`) become one log entry, stamped with one leader time, so a burst of
//! requests costs one replication round and one fsync instead of one each. Batches are handed to
//! Raft in order by this single task, which keeps stamps non-decreasing; their commits are awaited
//! concurrently, at most `batches_in_flight_max` at a time. While that pipeline is full, new
//! commands wait in the queue and leave together in the next entry, so batches grow with load
//! and no command waits for a batch to fill.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{Raft, RaftMetrics};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use super::machine::{decode_batch_result, encode_batch, BatchResult, SharedMachine};
use super::time::{LeaderClock, TimeSource};
use super::types::{NodeAddr, RaftCommand, TypeConfig};
use crate::replica::{Machine, ReplicaError};

/// One queued command and where its output goes.
pub(crate) struct Proposal<M: Machine> {
    pub command: M::Command,
    pub reply: oneshot::Sender<Result<M::Output, ReplicaError>>,
}

/// Settings of the proposer.
pub(crate) struct ProposerSettings {
    pub node_id: u64,
    pub batch_commands_max: usize,
    pub batches_in_flight_max: usize,
    pub propose_timeout: Duration,
    pub catch_up_timeout: Duration,
    /// A leader that has not heard from a quorum for longer than this refuses new batches.
    pub quorum_silence_max_ms: u64,
}

pub(crate) struct Proposer<M: Machine> {
    settings: ProposerSettings,
    raft: Raft<TypeConfig>,
    shared: Arc<SharedMachine<M>>,
    time: Arc<dyn TimeSource>,
    clock: LeaderClock,
    in_flight: Arc<Semaphore>,
}

/// `NotLeader` naming the leader `metrics` knows of, with its address from membership.
pub(crate) fn not_leader(metrics: &RaftMetrics<u64, NodeAddr>) -> ReplicaError {
    let leader_id = metrics.current_leader;
    ReplicaError::NotLeader {
        leader_id,
        leader_addr: leader_id.and_then(|id| leader_addr(metrics, id)),
    }
}

fn leader_addr(metrics: &RaftMetrics<u64, NodeAddr>, id: u64) -> Option<String> {
    metrics
        .membership_config
        .membership()
        .get_node(&id)
        .map(|n| n.addr.clone())
}

/// Maps a refusal to forward to the leader onto [`ReplicaError::NotLeader`].
pub(crate) fn forward_error(
    raft: &Raft<TypeConfig>,
    leader_id: Option<u64>,
    leader_node: Option<NodeAddr>,
) -> ReplicaError {
    let leader_addr = leader_node
        .map(|n| n.addr)
        .or_else(|| leader_id.and_then(|id| leader_addr(&raft.metrics().borrow(), id)));
    ReplicaError::NotLeader {
        leader_id,
        leader_addr,
    }
}

fn fail_all<M: Machine>(proposals: Vec<Proposal<M>>, err: &ReplicaError) {
    for p in proposals {
        // A caller that gave up waiting has dropped its receiver; nothing to tell it.
        let _ = p.reply.send(Err(err.clone()));
    }
}

impl<M: Machine> Proposer<M> {
    pub(crate) fn new(
        settings: ProposerSettings,
        raft: Raft<TypeConfig>,
        shared: Arc<SharedMachine<M>>,
        time: Arc<dyn TimeSource>,
    ) -> Self {
        let in_flight = Arc::new(Semaphore::new(settings.batches_in_flight_max));
        Self {
            settings,
            raft,
            shared,
            time,
            clock: LeaderClock::default(),
            in_flight,
        }
    }

    /// Runs until `stop` turns true or every sender is gone; queued proposals then fail.
    pub(crate) async fn run(
        mut self,
        mut queue: mpsc::Receiver<Proposal<M>>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            // Stop first: once shutdown began, no queued command is proposed any more.
            let first = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                p = queue.recv() => match p {
                    Some(p) => p,
                    None => return,
                },
            };
            // Waiting for a pipeline slot before draining is what forms batches under load:
            // everything that queues up while the pipeline is full leaves in the next entry.
            let permit = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => {
                    fail_all(vec![first], &ReplicaError::Unavailable("node shutting down".into()));
                    break;
                }
                permit = Arc::clone(&self.in_flight).acquire_owned() => {
                    permit.expect("the in-flight semaphore is never closed")
                }
            };
            let mut batch = vec![first];
            while batch.len() < self.settings.batch_commands_max {
                match queue.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            self.propose(batch, permit).await;
        }
        queue.close();
        let mut rest = Vec::new();
        while let Ok(p) = queue.try_recv() {
            rest.push(p);
        }
        fail_all(
            rest,
            &ReplicaError::Unavailable("node shutting down".into()),
        );
    }

    async fn propose(&mut self, batch: Vec<Proposal<M>>, permit: OwnedSemaphorePermit) {
        let term = match self.check_leadership().await {
            Ok(term) => term,
            Err(e) => return fail_all(batch, &e),
        };
        let stamp = self.clock.stamp(
            term,
            self.shared.time_anchor(),
            self.time.mono_ns(),
            self.time.wall_unix_ns(),
        );
        let (commands, replies): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|p| (p.command, p.reply)).unzip();
        let payload = match encode_batch(&commands) {
            Ok(p) => p,
            Err(e) => {
                let err = ReplicaError::Unavailable(format!("command batch does not encode: {e}"));
                return replies
                    .into_iter()
                    .for_each(|r| drop(r.send(Err(err.clone()))));
            }
        };
        let command = RaftCommand {
            payload,
            leader_time_ns: stamp,
        };
        let pending = match self.raft.client_write_ff(command).await {
            Ok(rx) => rx,
            Err(fatal) => {
                let err = ReplicaError::Unavailable(format!("raft stopped: {fatal}"));
                return replies
                    .into_iter()
                    .for_each(|r| drop(r.send(Err(err.clone()))));
            }
        };
        let raft = self.raft.clone();
        let timeout = self.settings.propose_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let outcome = match tokio::time::timeout(timeout, pending).await {
                Err(_) => Err(ReplicaError::Unknown(format!(
                    "batch not committed within propose_timeout_ms = {}",
                    timeout.as_millis()
                ))),
                Ok(Err(_dropped)) => Err(ReplicaError::Unknown(
                    "leadership changed before the batch was answered".into(),
                )),
                Ok(Ok(Err(ClientWriteError::ForwardToLeader(f)))) => {
                    Err(forward_error(&raft, f.leader_id, f.leader_node))
                }
                Ok(Ok(Err(ClientWriteError::ChangeMembershipError(e)))) => Err(
                    ReplicaError::Unknown(format!("unexpected membership error: {e}")),
                ),
                Ok(Ok(Ok(resp))) => Ok(resp.data.payload),
            };
            deliver::<M>(outcome, replies);
        });
    }

    /// The current term if this node leads and has heard from a quorum recently; otherwise why
    /// the batch cannot be proposed here. Before the first stamp of a node that has applied
    /// nothing, waits until every committed command is applied: only then does "no applied
    /// time" mean the log is empty and the wall clock may start the timeline.
    async fn check_leadership(&self) -> Result<u64, ReplicaError> {
        let term = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            if m.current_leader != Some(self.settings.node_id) {
                return Err(not_leader(&m));
            }
            if let Some(ms) = m.millis_since_quorum_ack {
                if ms > self.settings.quorum_silence_max_ms {
                    return Err(ReplicaError::Unavailable(format!(
                        "no quorum acknowledged the leader for {ms} ms"
                    )));
                }
            }
            m.current_term
        };
        if self.shared.applied_time().anchor().is_none() {
            self.catch_up().await?;
        }
        Ok(term)
    }

    async fn catch_up(&self) -> Result<(), ReplicaError> {
        let timeout = self.settings.catch_up_timeout;
        match tokio::time::timeout(timeout, self.raft.ensure_linearizable()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(linearizable_error(&self.raft, e)),
            Err(_) => Err(ReplicaError::Unavailable(format!(
                "leader could not confirm its log within {} ms",
                timeout.as_millis()
            ))),
        }
    }
}

/// Maps a failed leadership confirmation onto the caller's error.
pub(crate) fn linearizable_error(
    raft: &Raft<TypeConfig>,
    e: RaftError<u64, openraft::error::CheckIsLeaderError<u64, NodeAddr>>,
) -> ReplicaError {
    use openraft::error::CheckIsLeaderError;
    match e {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => {
            forward_error(raft, f.leader_id, f.leader_node)
        }
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)) => {
            ReplicaError::Unavailable(format!("leadership not confirmed by a quorum: {q}"))
        }
        RaftError::Fatal(f) => ReplicaError::Unavailable(format!("raft stopped: {f}")),
    }
}

/// Hands each caller the output of its own command.
fn deliver<M: Machine>(
    outcome: Result<Vec<u8>, ReplicaError>,
    replies: Vec<oneshot::Sender<Result<M::Output, ReplicaError>>>,
) {
    let outputs = outcome.and_then(|payload| {
        let decoded: BatchResult<M::Output> = decode_batch_result(&payload)
            .map_err(|e| ReplicaError::Unknown(format!("batch answer does not decode: {e}")))?;
        // A refused batch changed nothing, but only the state machine knows why; report the
        // outcome as unknown so that callers retry with the same request id.
        let outputs = decoded.map_err(|e| ReplicaError::Unknown(e.to_string()))?;
        if outputs.len() != replies.len() {
            return Err(ReplicaError::Unknown(format!(
                "batch of {} commands answered with {} outputs",
                replies.len(),
                outputs.len()
            )));
        }
        Ok(outputs)
    });
    match outputs {
        Ok(outputs) => {
            for (reply, out) in replies.into_iter().zip(outputs) {
                let _ = reply.send(Ok(out));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
