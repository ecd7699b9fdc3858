//! One round of the driver, in three phases: every due key records what must precede its
//! call (idle credit taken out of the ledger, a fresh look before a release), then all the
//! calls leave in one batch, then every answer is recorded. A key's own steps keep their
//! order; different keys' steps interleave, and their replicated commands share log
//! entries.

use super::exchange::{kind, Exchange, Pause};
use super::plan::{plan, views, KeyView, Step};
use super::send::BatchSender;
use super::UpstreamConfig;
use crate::replica::{Replica, ReplicaError};
use crate::state::AllocatorState;
use futures_util::stream::{self, StreamExt};
use leasehold_common::lease::wait_after_denial_ms;
use leasehold_common::time::Nanos;
use std::collections::HashMap;

/// Most keys whose replicated commands a round has proposed and not yet seen applied: as
/// many as the proposer puts in one log entry by default, so a phase of a round costs a
/// few entries, and the proposal queue keeps room for holders' calls.
const PROPOSALS_IN_FLIGHT_MAX: usize = 256;

/// What this node remembers between rounds; none of it is needed for safety, so a new
/// leader starts with none.
#[derive(Default)]
pub(super) struct Memory {
    last_report: HashMap<String, Nanos>,
    not_before: HashMap<String, Nanos>,
    /// The last key of the previous round; the next round starts after it.
    cursor: Option<String>,
}

impl Memory {
    fn forget(&mut self) {
        self.last_report.clear();
        self.not_before.clear();
        self.cursor = None;
    }
}

pub(super) async fn round<R: Replica<AllocatorState>>(
    ex: &Exchange<R>,
    sender: &BatchSender,
    memory: &mut Memory,
    cfg: &UpstreamConfig,
) {
    // Whatever a previous round's last phase found about leadership is stale by now.
    ex.still_leading();
    let Some((now, due)) = due_steps(ex, memory, cfg).await else {
        return;
    };
    if due.is_empty() {
        return;
    }
    let prepared: Vec<_> = stream::iter(due)
        .map(|(v, step)| async move {
            let r = ex.prepare(&v, &step, now).await;
            (v, step, r)
        })
        .buffered(PROPOSALS_IN_FLIGHT_MAX)
        .collect()
        .await;
    if !ex.still_leading() {
        return;
    }
    let (mut keys, mut calls) = (Vec::new(), Vec::new());
    for (v, step, r) in prepared {
        match r {
            Ok(Some(call)) => {
                keys.push((v, step, kind(&call)));
                calls.push(call);
            }
            Ok(None) => {}
            Err(p) => paused(memory, cfg, now, &v, &step, p),
        }
    }
    if calls.is_empty() {
        return;
    }
    let answers = sender.send(calls).await;
    let finished: Vec<_> = stream::iter(keys.into_iter().zip(answers))
        .map(|((v, step, call), answer)| async move {
            let r = ex.finish(&v, call, answer, now).await;
            (v, step, r)
        })
        .buffered(PROPOSALS_IN_FLIGHT_MAX)
        .collect()
        .await;
    for (v, step, r) in finished {
        if let Err(p) = r {
            paused(memory, cfg, now, &v, &step, p);
        }
    }
}

/// The ledger's time and the steps due now, planned from one read; None when this node
/// does not lead (it forgets its memory then, to start afresh if it leads again).
async fn due_steps<R: Replica<AllocatorState>>(
    ex: &Exchange<R>,
    memory: &mut Memory,
    cfg: &UpstreamConfig,
) -> Option<(Nanos, Vec<(KeyView, Step)>)> {
    let limit = cfg.plan.keys_per_round_max;
    let after = memory.cursor.clone();
    let read = ex
        .replica()
        .read(move |s| {
            let now = s.ledger().now();
            (now, views(s.ledger(), now, after.as_deref(), limit))
        })
        .await;
    let (now, keys) = match read {
        Ok(r) => r,
        Err(ReplicaError::NotLeader { .. }) => {
            memory.forget();
            return None;
        }
        Err(e) => {
            tracing::debug!(error = %e, "upstream round skipped");
            return None;
        }
    };
    // A key reported on longer ago than a release takes is due anyway; forgetting it keeps
    // the map bounded by the keys active lately.
    let forget_ns = cfg.plan.idle_release_ms.saturating_mul(1_000_000);
    memory
        .last_report
        .retain(|_, t| now.saturating_since(*t) < forget_ns);
    memory.not_before.retain(|_, t| *t > now);
    memory.cursor = keys.last().map(|v| v.key.clone());
    let mut due = Vec::new();
    for v in keys {
        if memory.not_before.contains_key(&v.key) {
            continue;
        }
        let step = plan(&v, now, memory.last_report.get(&v.key).copied(), &cfg.plan);
        if step == Step::Wait {
            continue;
        }
        tracing::debug!(key = %v.key, ?step, want = v.want, position = ?v.position, "upstream step");
        if matches!(step, Step::Report { .. }) {
            memory.last_report.insert(v.key.clone(), now);
        }
        due.push((v, step));
    }
    Some((now, due))
}

fn paused(
    memory: &mut Memory,
    cfg: &UpstreamConfig,
    now: Nanos,
    v: &KeyView,
    step: &Step,
    p: Pause,
) {
    let Pause { ms, why } = p;
    tracing::debug!(key = %v.key, ?step, why, ms, "upstream step paused");
    // An upstream denial names when its credit returns (a window's reset); other pauses
    // name nothing and wait retry_ms.
    let wait = wait_after_denial_ms(ms, cfg.retry_ms).saturating_mul(1_000_000);
    memory
        .not_before
        .insert(v.key.clone(), now.saturating_add_ns(wait));
}
