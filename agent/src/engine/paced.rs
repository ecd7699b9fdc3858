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
//! only for shaping policies, boxed: other keys keep the space of a null pointer, which
//! fits in what the largest key state (a local limiter) takes anyway, so no entry grows.

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

/// What a shaping leased key spends on its schedule, in one allocation of its own.
const PACER_SIZE_MAX_BYTES: usize = 80;
const _: () = assert!(std::mem::size_of::<Pacer>() <= PACER_SIZE_MAX_BYTES);

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

#[cfg(test)]
mod tests {
    use super::super::config::EngineLimits;
    use super::super::rules::{RuleOptions, RuleSet, RuleSource};
    use super::*;
    use leasehold_common::algo::Limiter;
    use leasehold_common::policy::Policy;

    const MS: u64 = 1_000_000;

    fn rules(policy_yaml: &str) -> RuleSet {
        let yaml = format!("id: p\ndimensions: [{{name: tenant}}]\n{policy_yaml}");
        let source = RuleSource::from_policies([Policy::from_yaml(&yaml).unwrap()]);
        let options = RuleOptions::new(&EngineLimits::default(), true);
        RuleSet::build(source, None, &options, jiff::Timestamp::now()).unwrap()
    }

    fn pacer_of(state: &EntryState) -> Option<Gcra> {
        match state {
            EntryState::Leased { pacer, .. } => pacer.as_ref().map(|p| p.lock().clone()),
            _ => panic!("a leased key's state"),
        }
    }

    #[test]
    fn only_keys_of_shaping_policies_keep_a_schedule() {
        let bucket = "rate: {units: 10, per: 1s}\nburst: 3\n";
        let shaping = format!("{bucket}shape: {{max_delay: 250ms}}\n");
        let cases = [
            (shaping.clone(), Some((10, 3))),
            (bucket.to_owned(), None),
            (format!("{shaping}mode: shadow\n"), None),
            // A window's tolerance is its limit, as its capacity is.
            (
                "algorithm: fixed_window\nrate: {units: 4, per: 2s}\n\
                 shape: {max_delay: 1s}\n"
                    .to_owned(),
                Some((4, 4)),
            ),
        ];
        for (yaml, expected) in cases {
            let rules = rules(&yaml);
            let p = rules.policy("p").unwrap();
            let pacer = pacer_of(&p.new_state(None, Nanos(0)));
            let got = pacer.map(|g| (g.rate().units(), g.burst()));
            assert_eq!(got, expected, "{yaml}");
        }
    }

    #[test]
    fn a_rebuilt_key_keeps_the_departures_scheduled() {
        let rules = rules("rate: {units: 10, per: 1s}\nburst: 1\nshape: {max_delay: 1s}\n");
        let p = rules.policy("p").unwrap();
        let entry = Entry::new("p:k".into(), 0, 0, p.new_state(None, Nanos(0)), Nanos(0));
        let EntryState::Leased {
            pacer: Some(pacer), ..
        } = &entry.state
        else {
            panic!("a shaping leased key keeps a schedule");
        };
        // Departures at 0, 100 and 200 ms, decided at 0.
        for at in [0, 100, 200] {
            assert!(pacer.lock().try_take(1, Nanos(at * MS)).is_admit());
        }
        let rebuilt = pacer_of(&p.new_state(Some(&entry), Nanos(0))).unwrap();
        assert_eq!(rebuilt.tat(), Nanos(300 * MS));
        assert_eq!(
            rebuilt.last(),
            Nanos(200 * MS),
            "decides no earlier than them"
        );
        let fresh = pacer_of(&p.new_state(None, Nanos(0))).unwrap();
        assert_eq!(fresh.available(Nanos(0)), 1);
    }
}
