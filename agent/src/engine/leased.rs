//! Spending leased credit (paced, for a shaping policy: see [`super::paced`]), and the
//! policy's failure behaviour when there is no live lease.

use super::acquire::{self, AcquireRequest};
use super::admit::{Ctx, Step};
use super::check::restricted;
use super::decision::{DenyReason, Outcome};
use super::paced::Paced;
use super::policy::CompiledPolicy;
use super::stats::Count;
use super::table::{EntryState, NOT_ACQUIRING};
use super::undo::{ChargeKind, Found};
use super::Engine;
use crate::credit::{CreditSlot, SlotState, SpendTicket};
use leasehold_common::policy::FailureMode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

impl Engine {
    /// Decides on leased credit, counting units refused and admitted fail-open on the key's
    /// slot: its leases report them to the grantor.
    #[inline(always)]
    pub(crate) fn check_leased(
        &self,
        p: &CompiledPolicy,
        key: &str,
        entry: Found<'_>,
        units: u64,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let step = self.spend_leased(p, key, entry, units, ctx);
        if let EntryState::Leased { slot, .. } = &entry.state {
            match step.outcome {
                Outcome::Denied(_) => slot.note_refused(units),
                Outcome::FailOpen => slot.note_fail_open(units),
                _ => {}
            }
        }
        step
    }

    #[inline(always)]
    fn spend_leased(
        &self,
        p: &CompiledPolicy,
        key: &str,
        entry: Found<'_>,
        units: u64,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let EntryState::Leased {
            slot,
            acquiring_since_ns,
            pacer,
        } = &entry.state
        else {
            unreachable!("called for leased entries only");
        };
        let now = ctx.now;
        let state = slot.state();
        // Fail-closed and restricted policies stop spending held credit as soon as the
        // grantor is found unreachable; the others may spend what they hold first.
        let spend_first = state != SlotState::Unreachable
            || matches!(p.failure, FailureMode::CachedLease | FailureMode::FailOpen);
        if !spend_first {
            slot.note_unspent(units, now.0);
            return self.on_failure(p, entry, slot.remaining(), units, ctx);
        }
        if let Some(pacer) = pacer {
            match self.spend_paced(pacer, slot, units, p.max_delay_ns, ctx) {
                Paced::Spent { ticket, delay_ns } => {
                    if delay_ns > 0 {
                        self.counters.bump(Count::ShapedAdmitted);
                        // Reported with the lease, for usage reconciliation.
                        slot.note_shaped(units);
                        ctx.delay_ns = delay_ns;
                    }
                    return admitted(p, entry, slot, units, ticket, ctx);
                }
                Paced::Refused(step) => {
                    slot.note_unspent(units, now.0);
                    return step;
                }
                Paced::NoCredit => {}
            }
        } else if let Some(ticket) = slot.try_spend(units, now.0) {
            return admitted(p, entry, slot, units, ticket, ctx);
        }
        slot.note_unspent(units, now.0);
        if state != SlotState::Acquiring && state != SlotState::Idle {
            // The wait for a lease restarts whenever the slot next waits for one.
            reset_wait(acquiring_since_ns);
        }
        match state {
            SlotState::Active => Step::deny(
                DenyReason::OverLimit,
                slot.remaining(),
                p.retry_after_ns(units),
            ),
            // The grantor's own time for the next credit (a window's end) beats the rate's.
            SlotState::Denied => Step::deny(
                DenyReason::LeaseRefused,
                slot.remaining(),
                match slot.retry_after_ns(now.0) {
                    0 => p.retry_after_ns(units),
                    granted_again => granted_again,
                },
            ),
            SlotState::Unreachable => self.on_failure(p, entry, slot.remaining(), units, ctx),
            SlotState::Idle => match self.ask_for_lease(p, key, slot, acquiring_since_ns, ctx) {
                Ok(()) => self.awaiting(p, entry, slot, acquiring_since_ns, units, ctx),
                Err(reason) => Step::deny(reason, 0, self.limits.acquire_wait_max_ns),
            },
            SlotState::Acquiring => self.awaiting(p, entry, slot, acquiring_since_ns, units, ctx),
        }
    }

    /// Claims the one acquire for an idle slot and queues it. A full queue puts the slot
    /// back to idle so that a later request asks again.
    fn ask_for_lease(
        &self,
        p: &CompiledPolicy,
        key: &str,
        slot: &Arc<CreditSlot>,
        acquiring_since_ns: &AtomicU64,
        ctx: &Ctx<'_>,
    ) -> Result<(), DenyReason> {
        if !slot.transition(SlotState::Idle, SlotState::Acquiring) {
            // Another request claimed it (or the lease manager moved it) just now.
            return Ok(());
        }
        acquiring_since_ns.store(ctx.now.0, Ordering::Release);
        let request = AcquireRequest {
            policy_id: Arc::clone(&p.id),
            policy_version: p.version,
            key: key.into(),
            slot: Arc::clone(slot),
            priority: ctx.priority,
            source: ctx.source,
        };
        if acquire::try_push(&self.acquire_tx, request) {
            return Ok(());
        }
        slot.transition(SlotState::Acquiring, SlotState::Idle);
        self.counters.bump(Count::AcquireQueueFull);
        Err(DenyReason::AcquireQueueFull)
    }

    /// The first lease is on its way: wait up to `acquire_wait_max_ns`, then treat the
    /// grantor as unreachable, unless it is answering the lease manager (the key's request
    /// is still queued, locally or at the grantor): then the key keeps waiting.
    fn awaiting(
        &self,
        p: &CompiledPolicy,
        entry: Found<'_>,
        slot: &CreditSlot,
        acquiring_since_ns: &AtomicU64,
        units: u64,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        // The lease manager may have set Acquiring itself; the wait starts when seen.
        let since = match acquiring_since_ns.compare_exchange(
            NOT_ACQUIRING,
            ctx.now.0,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => ctx.now.0,
            Err(since) => since,
        };
        let waited = ctx.now.0.saturating_sub(since);
        match self.limits.acquire_wait_max_ns.checked_sub(waited) {
            Some(left) if left > 0 => Step::deny(DenyReason::AwaitingLease, slot.remaining(), left),
            _ if self.grantor_answering(ctx.now) => Step::deny(
                DenyReason::AwaitingLease,
                slot.remaining(),
                self.limits.acquire_wait_max_ns,
            ),
            _ => self.on_failure(p, entry, slot.remaining(), units, ctx),
        }
    }

    /// The grantor cannot be reached and the held credit (if any, `remaining` of it) did
    /// not cover `units`: the policy's failure behaviour, for leased and exact policies.
    pub(crate) fn on_failure(
        &self,
        p: &CompiledPolicy,
        entry: Found<'_>,
        remaining: u64,
        units: u64,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let hint = self.limits.acquire_wait_max_ns;
        match p.failure {
            FailureMode::FailClosed | FailureMode::CachedLease => {
                Step::deny(DenyReason::Unreachable, remaining, hint)
            }
            FailureMode::FailOpen => Step::pass(Outcome::FailOpen),
            FailureMode::Restricted => match p.restricted {
                Some(spec) => restricted(entry, units, spec.min_priority, spec.rate, ctx),
                // Validation requires both fields; without them, refuse rather than open.
                None => Step::deny(DenyReason::Restricted, 0, hint),
            },
        }
    }
}

fn reset_wait(acquiring_since_ns: &AtomicU64) {
    if acquiring_since_ns.load(Ordering::Relaxed) != NOT_ACQUIRING {
        acquiring_since_ns.store(NOT_ACQUIRING, Ordering::Relaxed);
    }
}

#[inline(always)]
fn admitted(
    p: &CompiledPolicy,
    entry: Found<'_>,
    slot: &CreditSlot,
    units: u64,
    ticket: SpendTicket,
    ctx: &mut Ctx<'_>,
) -> Step {
    if ctx.keep {
        ctx.charged(ChargeKind::Slot(ticket), entry, units);
    }
    let remaining = slot.remaining();
    Step {
        outcome: Outcome::Admitted,
        remaining,
        reset_after_ns: p.ns_to_earn(p.capacity.saturating_sub(remaining)),
        retry_after_ns: 0,
    }
}
