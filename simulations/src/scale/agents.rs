//! The agents of a scale run, modelled: each holds a lease per key it serves at its
//! region, spends each key's demand against it, and every report interval reports on (and
//! renews) all its keys in one `LeaseBatch`. The production agent's admission path is not
//! what a scale run measures; its calls to the region are, and they are the lease
//! protocol's own.

use leasehold_client::Grantor;
use leasehold_proto::leasehold::v1 as pb;
use pb::lease_batch_item::Call;
use pb::lease_batch_outcome::Outcome;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The policy every key of a scale run falls under.
pub const POLICY_ID: &str = "api";

/// One key an agent serves.
pub struct KeyLoad {
    pub key: String,
    /// Units per second the agent admits on it while it holds credit.
    pub demand_milli_per_sec: u64,
}

struct Held {
    lease_id: u64,
    credit: u64,
    used: u64,
}

/// An agent's state of one key.
#[derive(Default)]
struct Slot {
    held: Option<Held>,
    /// Demand of past intervals not yet a whole unit, in milli-units times milliseconds
    /// per second.
    carry: u64,
}

/// Units admitted by every agent, and their calls.
#[derive(Debug, Default)]
pub struct AgentTally {
    pub admitted: AtomicU64,
    pub batches: AtomicU64,
    pub calls: AtomicU64,
}

pub struct Agent {
    pub holder_id: String,
    pub keys: Vec<KeyLoad>,
    pub report_every_ms: u64,
    /// Credit asked for, as seconds of the key's demand.
    pub horizon_ms: u64,
    /// When the first report goes out, so that agents do not all report at one instant.
    pub phase_ms: u64,
}

impl Agent {
    /// Runs until the task is dropped.
    pub async fn run(self, region: Arc<dyn Grantor>, tally: Arc<AgentTally>) {
        let mut slots: Vec<Slot> = self.keys.iter().map(|_| Slot::default()).collect();
        let mut request_id = 0u64;
        tokio::time::sleep(Duration::from_millis(self.phase_ms)).await;
        let mut every = tokio::time::interval(Duration::from_millis(self.report_every_ms));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let mut items = Vec::with_capacity(self.keys.len());
            for (k, slot) in self.keys.iter().zip(slots.iter_mut()) {
                request_id += 1;
                items.push(self.call(k, slot, request_id, &tally));
            }
            for (chunk, slots) in items
                .chunks(leasehold_client::LEASE_BATCH_ITEMS_MAX)
                .zip(slots.chunks_mut(leasehold_client::LEASE_BATCH_ITEMS_MAX))
            {
                let req = pb::LeaseBatchRequest {
                    holder_id: self.holder_id.clone(),
                    items: chunk.to_vec(),
                };
                tally.batches.fetch_add(1, Relaxed);
                tally.calls.fetch_add(chunk.len() as u64, Relaxed);
                if let Ok(resp) = region.lease_batch(req).await {
                    for (o, slot) in resp.outcomes.into_iter().zip(slots.iter_mut()) {
                        settle(o, &mut slot.held);
                    }
                }
            }
        }
    }

    /// The key's call this interval: spend what the interval's demand takes of the held
    /// credit, then report it asking for the horizon's worth again; or acquire.
    fn call(
        &self,
        k: &KeyLoad,
        slot: &mut Slot,
        request_id: u64,
        tally: &AgentTally,
    ) -> pb::LeaseBatchItem {
        let per_horizon = k.demand_milli_per_sec * self.horizon_ms / 1_000_000;
        let call = match slot.held.as_mut() {
            Some(h) => {
                let owed = k.demand_milli_per_sec * self.report_every_ms + slot.carry;
                let want = owed / 1_000_000;
                slot.carry = owed % 1_000_000;
                // What the credit cannot cover is refused, not owed.
                let spent = want.min(h.credit - h.used);
                h.used += spent;
                tally.admitted.fetch_add(spent, Relaxed);
                Call::Report(pb::ReportRequest {
                    lease_id: h.lease_id,
                    used: h.used,
                    want_credit: per_horizon.saturating_sub(h.credit - h.used),
                    demand_milli_units_per_sec: k.demand_milli_per_sec,
                    request_id,
                    ..Default::default()
                })
            }
            None => Call::Acquire(pb::AcquireRequest {
                policy_id: POLICY_ID.into(),
                key: k.key.clone(),
                want_credit: per_horizon.max(1),
                demand_milli_units_per_sec: k.demand_milli_per_sec,
                request_id,
                ..Default::default()
            }),
        };
        pb::LeaseBatchItem { call: Some(call) }
    }
}

fn settle(o: pb::LeaseBatchOutcome, h: &mut Option<Held>) {
    match o.outcome {
        Some(Outcome::Acquired(a)) => {
            if let Some(l) = a.lease {
                *h = Some(Held {
                    lease_id: l.lease_id,
                    credit: l.credit,
                    used: 0,
                });
            }
        }
        Some(Outcome::Reported(r)) => match (r.lease, h.as_mut()) {
            (Some(l), Some(held)) if l.lease_id == held.lease_id => held.credit = l.credit,
            _ => *h = None,
        },
        // The lease ended at the region (expired, revoked): acquire afresh next time.
        Some(Outcome::Failed(f)) if f.code != tonic::Code::Unavailable as i32 => *h = None,
        _ => {}
    }
}
