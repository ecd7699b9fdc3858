//! Keeping held leases alive: reports, renewals, hand-backs and releases.

use super::bounded::bounded;
use super::manager::{Held, HeldKey, LeaseManager, NS_PER_MS};
use crate::credit::{CreditSlot, SlotState};
use crate::engine::AcquireRequest;
use leasehold_client::GrantorError;
use leasehold_common::lease::HolderConfig;
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

impl LeaseManager {
    /// Demand in units per second since the last report, and the credit wanted for the
    /// refresh horizon at that demand.
    pub(super) fn demand(&self, h: &Held, now: Nanos) -> (u64, u64) {
        let elapsed_ns = now.saturating_since(h.last_report).max(1);
        let offered = h.slot.offered().saturating_sub(h.offered_at_report);
        let per_sec = u64::try_from(u128::from(offered) * 1_000_000_000 / u128::from(elapsed_ns))
            .unwrap_or(u64::MAX);
        let horizon = per_sec.saturating_mul(self.cfg.holder.refresh_horizon_ms) / 1_000;
        (per_sec, horizon.max(1))
    }

    /// Looks at every held lease: those due report or renew, side by side
    /// (`renew_in_flight_max` at once); expired, dropped and idle ones are released.
    /// Leases in use (requests since their last report) are all served every round; the
    /// calls for the others (reports, renewals and releases of keys nobody uses now, most
    /// of a spray's) are at most `quiet_calls_per_tick_max` a round, the rest waiting for
    /// the next, so that they never hold up a round, nor the grantor, for long.
    pub(super) async fn maintain_all(&mut self, now: Nanos) {
        let keys: Vec<HeldKey> = self.held.keys().cloned().collect();
        let mut releases = Vec::new();
        let mut reports = Vec::new();
        let mut quiet = self.cfg.quiet_calls_per_tick_max;
        for k in keys {
            match self.maintenance(&k, now) {
                Todo::Nothing => {}
                Todo::Report { in_use: true } => reports.push(k),
                _ if quiet == 0 => {}
                Todo::Report { in_use: false } => {
                    quiet -= 1;
                    reports.push(k);
                }
                Todo::Release { evicted } => {
                    quiet -= 1;
                    self.counters.evicted_released += u64::from(evicted);
                    releases.push(self.held.remove(&k).expect("present"));
                }
            }
        }
        self.release_all_of(releases).await;
        let calls: Vec<_> = reports
            .into_iter()
            .map(|k| self.report_request(k, now))
            .collect();
        let grantor = Arc::clone(&self.grantor);
        let unanswered = Duration::from_millis(self.cfg.report_unanswered_ms.max(1));
        let answers = bounded(calls, self.cfg.renew_in_flight_max, |(k, used, slot, r)| {
            let grantor = &grantor;
            async move { (k, used, watched(grantor.report(r), &slot, unanswered).await) }
        })
        .await;
        for (k, used, answer) in answers {
            self.reported(k, used, answer, now).await;
        }
    }

    fn maintenance(&mut self, k: &HeldKey, now: Nanos) -> Todo {
        let Some(h) = self.held.get(k) else {
            return Todo::Nothing;
        };
        // A lease granted a few milliseconds before its end has a ttl shorter than any
        // round trip; a grantor heard from within a report interval still answers.
        let lately_ns = h
            .ttl_ns
            .max(self.cfg.report_every_ms.saturating_mul(NS_PER_MS));
        let heard_lately = now.saturating_since(h.last_report) <= lately_ns;
        if now >= h.deadline && (h.pinned || heard_lately) {
            // Spending under it is over and its usage exact. A lease that ends with its
            // window, or whose grantor answered within one ttl (a lease granted too near a
            // window's end to renew), is released rather than left for the grantor to
            // write off as stranded.
            return Todo::Release { evicted: false };
        }
        if now >= h.deadline {
            // Expired, its grantor silent: stop; the grantor writes it off.
            let h = self.held.remove(k).expect("present");
            tracing::debug!(key = %h.key, lease_id = h.lease_id, credit = h.credit, "lease expired unreleased, its grantor silent");
            h.slot.close();
            h.slot.set_state(SlotState::Idle);
            self.forget.push(h.lease_id);
            return Todo::Nothing;
        }
        // The engine dropped the key (idle, or its policy removed), so nothing can spend
        // the lease any more; hand it back now.
        if Arc::strong_count(&h.slot) == 1 || h.slot.is_detached() {
            return Todo::Release { evicted: true };
        }
        let idle_ns = self.cfg.idle_release_ms * NS_PER_MS;
        if now.0.saturating_sub(h.slot.last_offered_ns()) >= idle_ns
            && now.saturating_since(h.last_report) >= idle_ns
        {
            return Todo::Release { evicted: false };
        }
        let (per_sec, horizon) = self.demand(h, now);
        // A lease with nothing new to tell (no use, no demand before or now) is not
        // reported on the clock: a key sprayed once costs the grantor no call per round.
        let news = h.spent() != h.reported_used
            || h.slot.offered() != h.offered_at_report
            || h.reported_demand != per_sec;
        let report_due =
            news && now.saturating_since(h.last_report) >= self.cfg.report_every_ms * NS_PER_MS;
        let unspent = h.slot.remaining() + (h.credit - h.in_slot());
        let running_low = 2 * unspent < horizon && now >= h.ask_again_at;
        let renew_within_ns = renew_within_ns(&self.cfg.holder, h.ttl_ns);
        let expiring = !h.pinned && h.deadline.saturating_since(now) < renew_within_ns;
        if report_due || running_low || expiring {
            Todo::Report {
                in_use: running_low || h.slot.offered() != h.offered_at_report,
            }
        } else {
            Todo::Nothing
        }
    }

    /// The report of lease `k`, handing back credit far beyond its demand.
    fn report_request(
        &mut self,
        k: HeldKey,
        now: Nanos,
    ) -> (HeldKey, u64, Arc<CreditSlot>, pb::ReportRequest) {
        let request_id = self.request_id();
        let (per_sec, horizon) = {
            let h = &self.held[&k];
            self.demand(h, now)
        };
        let h = self.held.get_mut(&k).expect("present");
        // Credit far beyond demand goes back, so idle credit flows to where demand is:
        // first what the mark held back from the slot, then from the slot itself.
        let held_back = h.credit - h.in_slot();
        let surplus = (h.slot.remaining() + held_back).saturating_sub(4 * horizon);
        if surplus > 0 {
            let from_back = surplus.min(held_back);
            let from_slot = h.slot.withdraw(surplus - from_back);
            h.withdrawn += from_slot;
            h.returned += from_back + from_slot;
            h.credit -= from_back + from_slot;
        }
        let used = h.spent();
        let unspent = h.slot.remaining() + (h.credit - h.in_slot());
        h.counts_sent = h.slot.counts();
        let counts = h.counts_sent.since(h.counts_base);
        let r = pb::ReportRequest {
            holder_id: self.cfg.holder_id.clone(),
            lease_id: h.lease_id,
            used,
            return_credit: h.returned,
            want_credit: (2 * horizon).saturating_sub(unspent),
            demand_milli_units_per_sec: per_sec.saturating_mul(1_000),
            request_id,
            policy_version: 0,
            shadow_would_deny: h.slot.shadow_denied(),
            refused_units: counts.refused,
            shaped_units: counts.shaped,
            fail_open_units: counts.fail_open,
        };
        h.reported_demand = per_sec;
        self.counters.reports += 1;
        (k, used, Arc::clone(&h.slot), r)
    }

    async fn reported(
        &mut self,
        k: HeldKey,
        used: u64,
        answer: Result<pb::ReportResponse, GrantorError>,
        sent_at: Nanos,
    ) {
        self.note_answer(&answer);
        if !self.held.contains_key(&k) {
            return;
        }
        match answer {
            Ok(resp) => self.renewed(k, resp, used, sent_at).await,
            Err(GrantorError::Unreachable(_)) => {
                self.counters.unreachable += 1;
                self.held[&k].slot.set_state(SlotState::Unreachable);
            }
            // Nothing was applied; the report goes again next round with a higher id.
            Err(GrantorError::StaleRequest { last }) => self.continue_above(last),
            Err(GrantorError::Refused { .. }) => {
                // Closed, expired or revoked at the grantor: stop spending it; a later
                // request for the key asks for a new lease.
                let h = self.held.remove(&k).expect("present");
                self.release(h).await;
            }
        }
    }

    async fn renewed(&mut self, k: HeldKey, resp: pb::ReportResponse, used: u64, sent_at: Nanos) {
        // An unverified version changes nothing: the lease keeps its credit and deadline.
        let lease = resp.lease.filter(|l| self.verified(l));
        let replacement = resp.replacement.filter(|l| self.verified(l));
        let retry_ms = self.cfg.retry_ms;
        let h = self.held.get_mut(&k).expect("present");
        if resp.retry_after_ms > 0 {
            let wait = resp.retry_after_ms.max(retry_ms) * NS_PER_MS;
            h.ask_again_at = sent_at.saturating_add_ns(wait);
        }
        h.reported_used = used;
        h.last_report = sent_at;
        h.slot.acknowledge(h.counts_sent);
        h.offered_at_report = h.slot.offered();
        if h.slot.state() == SlotState::Unreachable {
            h.slot.set_state(SlotState::Active);
        }
        if let Some(lease) = lease {
            h.credit = h.credit.max(lease.credit);
            if lease.generation > h.generation {
                let deadline = self.cfg.holder.deadline(sent_at, lease.ttl_ms);
                tracing::debug!(key = %h.key, lease_id = h.lease_id, credit = lease.credit, ttl_ms = lease.ttl_ms, retry_after_ms = resp.retry_after_ms, "lease renewed");
                let renew_within_ns = renew_within_ns(&self.cfg.holder, h.ttl_ns);
                h.pinned = deadline.saturating_since(h.deadline) < renew_within_ns;
                h.generation = lease.generation;
                h.deadline = deadline;
                h.ttl_ns = lease.ttl_ms.saturating_mul(NS_PER_MS);
                // Moves the deadline; new credit follows once the mark allows it.
                h.slot.deposit(0, h.deadline.0);
            }
        }
        if let Some(new) = replacement {
            let old = self.held.remove(&k).expect("present");
            let req = AcquireRequest {
                policy_id: old.policy_id.clone(),
                policy_version: new.policy_version,
                key: old.key.clone(),
                slot: Arc::clone(&old.slot),
                priority: old.priority,
                source: 0,
            };
            self.release(old).await;
            self.start(req, new, sent_at);
        }
    }

    /// Closes the slot and releases the lease with its exact final usage.
    pub(super) async fn release(&mut self, h: Held) {
        self.release_all_of(vec![h]).await;
    }

    /// [`LeaseManager::release`] for each of `leases`, side by side.
    pub(super) async fn release_all_of(&mut self, leases: Vec<Held>) {
        if leases.is_empty() {
            return;
        }
        let calls: Vec<_> = leases
            .into_iter()
            .map(|h| {
                let unspent = h.slot.close();
                let final_used = h.in_slot().saturating_sub(unspent).max(h.reported_used);
                let counts = h.slot.counts();
                let last = counts.since(h.counts_base);
                let r = pb::ReleaseRequest {
                    holder_id: self.cfg.holder_id.clone(),
                    lease_id: h.lease_id,
                    final_used,
                    request_id: self.request_id(),
                    refused_units: last.refused,
                    shaped_units: last.shaped,
                    fail_open_units: last.fail_open,
                };
                self.counters.releases += 1;
                tracing::debug!(key = %h.key, lease_id = h.lease_id, final_used, credit = h.credit, "lease released");
                (h, final_used, counts, r)
            })
            .collect();
        let grantor = Arc::clone(&self.grantor);
        let answers = bounded(
            calls,
            self.cfg.renew_in_flight_max,
            |(h, final_used, counts, r)| {
                let grantor = &grantor;
                async move { (h, final_used, counts, grantor.release(r).await) }
            },
        )
        .await;
        for (h, final_used, counts, answer) in answers {
            self.note_answer(&answer);
            match answer {
                Ok(resp) => {
                    h.slot.acknowledge(counts);
                    self.counters.reclaimed += resp.reclaimed;
                    self.forget.push(h.lease_id);
                }
                Err(GrantorError::Refused { .. }) => self.forget.push(h.lease_id),
                Err(GrantorError::StaleRequest { last }) => {
                    self.continue_above(last);
                    self.orphans.insert(h.lease_id, final_used);
                }
                // Asked again every step; its record stays in the store until then, so a
                // restart in between releases it with its mark.
                Err(GrantorError::Unreachable(_)) => {
                    self.orphans.insert(h.lease_id, final_used);
                }
            }
            h.slot.set_state(SlotState::Idle);
        }
    }
}

/// What a held lease needs this round.
enum Todo {
    Nothing,
    /// A report or renewal; `in_use`: the key had requests since its last report.
    Report {
        in_use: bool,
    },
    /// A release; `evicted`: the engine dropped the key.
    Release {
        evicted: bool,
    },
}

/// How close to its deadline a lease asks to be renewed. A lease the holder configuration
/// would call expiring for most of its life (a refresh horizon as long as the lease) is
/// renewed once half of it has gone, not on every tick.
fn renew_within_ns(holder: &HolderConfig, ttl_ns: u64) -> u64 {
    holder.refresh_horizon_ns().min(ttl_ns / 2)
}

/// Awaits `call`; if it is still unanswered after `unanswered`, marks `slot`'s grantor
/// unreachable and goes on waiting. An answer that comes later sets the slot active again.
async fn watched<T>(call: impl Future<Output = T>, slot: &CreditSlot, unanswered: Duration) -> T {
    let mut call = std::pin::pin!(call);
    tokio::select! {
        out = &mut call => out,
        () = tokio::time::sleep(unanswered) => {
            if slot.state() == SlotState::Active {
                slot.set_state(SlotState::Unreachable);
            }
            call.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn active_slot() -> CreditSlot {
        let slot = CreditSlot::new();
        slot.set_state(SlotState::Active);
        slot
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_unanswered_for_too_long_marks_the_grantor_unreachable_meanwhile() {
        let slot = active_slot();
        let answer = async {
            tokio::time::sleep(Duration::from_millis(3_000)).await;
            7
        };
        let watching = watched(answer, &slot, Duration::from_millis(1_000));
        let mut watching = std::pin::pin!(watching);
        // Still waiting at 1.5 s: the slot already says unreachable.
        let early = tokio::time::timeout(Duration::from_millis(1_500), &mut watching).await;
        assert!(early.is_err());
        assert_eq!(slot.state(), SlotState::Unreachable);
        assert_eq!(watching.await, 7);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timely_answer_leaves_the_slot_alone() {
        let slot = active_slot();
        let answer = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            7
        };
        assert_eq!(
            watched(answer, &slot, Duration::from_millis(1_000)).await,
            7
        );
        assert_eq!(slot.state(), SlotState::Active);
    }
}
