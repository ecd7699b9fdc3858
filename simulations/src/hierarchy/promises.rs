//! The checks a hierarchy runs on itself: P2 and P4 after every step, P1 over every
//! window at the end (per policy version, with the documented transition after a rollout).

use super::{Hierarchy, KEY};
use crate::bound::check_span;
use crate::promises::{Promise, PromiseLog};
use leasehold_common::ledger::Ledger;
use leasehold_common::rate::Rate;

impl Hierarchy {
    /// Time after a rollout during which credit granted under the old version may still be
    /// spent: the root's lease lifetime plus the grantor's write-off grace.
    pub fn transition_ns(&self) -> u64 {
        (self.cfg.root_ttl_ms + self.root.ledger().config().expiry_grace_ms) * 1_000_000
    }

    pub(super) fn check_step(&mut self, now: u64) {
        let mut log = std::mem::take(&mut self.witness.log);
        for (name, ledger) in self.named_ledgers() {
            check_ledger(&mut log, &name, ledger, now);
        }
        self.check_levels(&mut log, now);
        let regions: Vec<&Ledger> = self.regions.iter().map(|r| r.ledger()).collect();
        self.witness.log = log;
        self.witness.end_of_step(&regions, now);
    }

    fn named_ledgers(&self) -> Vec<(String, &Ledger)> {
        std::iter::once(("root".to_string(), self.root.ledger()))
            .chain(
                self.regions
                    .iter()
                    .map(|r| (format!("region {}", r.id()), r.ledger())),
            )
            .collect()
    }

    /// No region believes it holds more of a root lease than the root granted, nor keeps
    /// sub-leasing one the root has written off.
    fn check_levels(&self, log: &mut PromiseLog, now: u64) {
        for r in &self.regions {
            let (Some(up), Some(pos)) = (r.upstream_lease_id(), r.ledger().upstream_position(KEY))
            else {
                continue;
            };
            if pos.upstream_lease_id != up {
                continue;
            }
            match self.root.ledger().lease(up) {
                Some(rec) if pos.credit > rec.lease.credit => {
                    log.record(Promise::NoDoubleSpend, now, || {
                        format!(
                            "region {} holds {} of root lease {up}, granted {}",
                            r.id(),
                            pos.credit,
                            rec.lease.credit
                        )
                    })
                }
                Some(_) => {}
                None if pos.idle > 0 => log.record(Promise::NoDoubleSpend, now, || {
                    format!(
                        "region {} can still sub-lease {} of root lease {up}, written off at the root",
                        r.id(),
                        pos.idle
                    )
                }),
                None => {}
            }
        }
    }

    /// P1 over every window of the admissions, per policy version.
    pub(super) fn budget_log(&self) -> PromiseLog {
        let mut log = PromiseLog::default();
        let step_ns = self.cfg.step_ns();
        let transition_steps = self.transition_ns().div_ceil(step_ns) as usize;
        for (i, e) in self.epochs.iter().enumerate() {
            let end = self
                .epochs
                .get(i + 1)
                .map_or(self.series.len(), |n| n.from_step);
            let mut spans = vec![(e.from_step, e.rate, e.burst, "")];
            if i > 0 {
                // Windows that start during the transition may also spend the old
                // version's outstanding credit; later windows get the new bound alone.
                let prev = self.epochs[i - 1];
                let rate = faster(prev.rate, e.rate);
                spans[0] = (e.from_step, rate, e.burst + prev.burst, " (transition)");
                spans.push((e.from_step + transition_steps, e.rate, e.burst, ""));
            }
            for (start, rate, burst, note) in spans {
                if start >= end {
                    continue;
                }
                let c = check_span(&self.series, start..end, step_ns, rate, burst);
                if c.violations > 0 {
                    let at_ns = c.worst_start as u64 * step_ns;
                    log.record(Promise::BudgetBound, at_ns, || {
                        format!(
                            "{} windows of version {} over B + r·T{note}; worst by {} units",
                            c.violations,
                            i + 1,
                            c.worst_excess
                        )
                    });
                }
            }
        }
        log
    }
}

/// Conservation (P2) and caps (P4) of one ledger.
fn check_ledger(log: &mut PromiseLog, name: &str, ledger: &Ledger, now: u64) {
    if !ledger.conserved() {
        log.record(Promise::NoDoubleSpend, now, || {
            format!("{name}: a key's units no longer add up")
        });
    }
    let limits = &ledger.config().limits;
    let keys = ledger.accounts().count();
    let leases = ledger.leases().count();
    if keys > limits.keys_max || leases > limits.leases_max {
        log.record(Promise::BoundedState, now, || {
            format!(
                "{name}: {keys} keys (max {}), {leases} leases (max {})",
                limits.keys_max, limits.leases_max
            )
        });
    }
}

/// The faster of two rates.
fn faster(a: Rate, b: Rate) -> Rate {
    const SECOND_NS: u64 = 1_000_000_000;
    if a.units_in(SECOND_NS) >= b.units_in(SECOND_NS) {
        a
    } else {
        b
    }
}
