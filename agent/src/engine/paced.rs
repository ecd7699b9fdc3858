//! Shaping at a leased key: a pacer over the credit this agent holds.
//!
//! A leased key's credit is spendable at once, so credit alone gives no time to wait for.
//! A shaping leased key therefore keeps a GCRA schedule of its own (the policy's `rate`,
//! its capacity as the burst tolerance, as a local shaping key's limiter has): a request
//! departs at the earliest time that schedule allows, within `max_delay`, and its units
//! are spent from the held credit *now*, when it is decided. Credit not held is never
//! scheduled against: a grant the lease manager has not received may never come. So the
//! departures from one agent's key stay within `burst + rate·T` over any interval `T`, and
//! the units they carry were all granted (held credit is spent once, at decision time).
//!
//! A refusal, whatever refused it (the schedule, the waiting cap or the credit), leaves
//! both the schedule and the credit as they were. The schedule lives in the key's entry
//! only for shaping policies: other keys keep the space of a null pointer, which fits in
//! what the largest key state (a local limiter) takes anyway.

use super::admit::{Ctx, Step};
use super::decision::DenyReason;
use super::policy::CompiledPolicy;
use super::spin::SpinLock;
use super::stats::Count;
use super::table::{Entry, EntryState};
use super::Engine;
use crate::credit::{CreditSlot, SpendTicket};
use leasehold_common::algo::{take_shaped, Gcra, Shaped};
use leasehold_common::time::Nanos;

/// A shaping leased key's schedule of departures.
pub(crate) type Pacer = SpinLock<Gcra>;

/// What a paced spend came to.
pub(crate) enum Paced {
    /// Spent from the held credit, departing `delay_ns` from now.
    Spent { ticket: SpendTicket, delay_ns: u64 },
    /// The schedule (or the waiting cap) refused; nothing was charged.
    Refused(Step),
    /// The held credit does not cover the units; nothing was charged, and the key goes on
    /// as a leased key without credit does.
    NoCredit,
}

impl CompiledPolicy {
    /// The schedule of a new leased key of this policy, if it shapes. A key rebuilt for a
    /// new version keeps the departures its previous state scheduled: its theoretical
    /// arrival time, read at its clock (which runs ahead of `now` while departures are
    /// scheduled), so a version change neither releases a second burst on top of them nor
    /// sends a request before them.
    pub(crate) fn new_pacer(&self, stale: Option<&Entry>, now: Nanos) -> Option<Box<Pacer>> {
        if self.max_delay_ns == 0 {
            return None;
        }
        let rate = self.policy.rate?.to_rate().ok()?;
        let stale = stale.and_then(|e| match &e.state {
            EntryState::Leased {
                pacer: Some(pacer), ..
            } => {
                let g = pacer.lock();
                Some((g.tat(), g.last()))
            }
            _ => None,
        });
        // Validation keeps the burst positive and its window on the timeline; a policy
        // that somehow is not stays unpaced, deciding as a leased key without shaping.
        let gcra = match stale {
            Some((tat, clock)) => Gcra::with_tat(rate, self.capacity, tat.0, 0, now.max(clock)),
            None => Gcra::full(rate, self.capacity, now),
        };
        gcra.ok().map(|g| Box::new(SpinLock::new(g)))
    }
}

impl Engine {
    /// Spends `units` of the slot's held credit at the earliest departure `pacer` allows
    /// within the policy's `max_delay` (none for a request that does not accept a delay).
    /// The credit is spent last, under the pacer's lock, so that everything before it can
    /// be put back exactly if the credit falls short.
    pub(crate) fn spend_paced(
        &self,
        pacer: &Pacer,
        slot: &CreditSlot,
        units: u64,
        max_delay_ns: u64,
        ctx: &Ctx<'_>,
    ) -> Paced {
        let max_delay_ns = if ctx.accept_delay { max_delay_ns } else { 0 };
        let now = ctx.now;
        let mut schedule = pacer.lock();
        let saved = schedule.clone();
        let delay_ns = match take_shaped(&mut *schedule, units, now, max_delay_ns, |_| true) {
            Shaped::Admit { delay_ns, .. } => delay_ns,
            Shaped::Deny { retry_after_ns, .. } => {
                return Paced::Refused(Step::deny(
                    DenyReason::OverLimit,
                    slot.remaining(),
                    retry_after_ns,
                ))
            }
        };
        let departure = now.saturating_add_ns(delay_ns);
        if delay_ns > 0 && !self.waiting.try_hold(now, departure) {
            *schedule = saved;
            self.counters.bump(Count::ShapedWaitingFull);
            // By the departure it was offered, the units go without waiting.
            return Paced::Refused(Step::deny(
                DenyReason::OverLimit,
                slot.remaining(),
                delay_ns,
            ));
        }
        match slot.try_spend(units, now.0) {
            Some(ticket) => Paced::Spent { ticket, delay_ns },
            None => {
                *schedule = saved;
                if delay_ns > 0 {
                    // Places are told apart only by departure: giving back any one of
                    // those at this time frees the place just taken.
                    self.waiting.release(departure);
                }
                Paced::NoCredit
            }
        }
    }
}
