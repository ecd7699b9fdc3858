//! The promises a simulation checks, and the record of any it saw broken.

use serde::Serialize;
use std::fmt;

/// A promise of the product that a scenario checks step by step.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Promise {
    /// P1: units admitted in every window of length `T` stay within `B + r·T`.
    BudgetBound,
    /// P2: every ledger conserves its units, no lease is spent beyond its credit, no level
    /// believes it holds more than its grantor granted, and a crashed holder's credit stays
    /// booked until its lease expires.
    NoDoubleSpend,
    /// P3: nothing is spent under a lease after it expired (by the grantor's reckoning).
    LeaseExpiry,
    /// P4: keys and leases in every ledger stay within their caps.
    BoundedState,
    /// P7: what the enforcers counted (offered, admitted, rejected, fail-open, restricted)
    /// agrees with what was offered and admitted, and what the grantor counts as granted,
    /// used, reclaimed and stranded accounts for every unit it put on lease.
    HonestAccounting,
}

impl Promise {
    pub const ALL: [Promise; 5] = [
        Promise::BudgetBound,
        Promise::NoDoubleSpend,
        Promise::LeaseExpiry,
        Promise::BoundedState,
        Promise::HonestAccounting,
    ];

    /// The promises the in-process model checks: its holders are the simulation's own, so
    /// the enforcers' counters (P7) are checked only where the product's code runs.
    pub const MODEL: [Promise; 4] = [
        Promise::BudgetBound,
        Promise::NoDoubleSpend,
        Promise::LeaseExpiry,
        Promise::BoundedState,
    ];

    /// The promise's code in the design brief.
    pub fn code(self) -> &'static str {
        match self {
            Promise::BudgetBound => "P1",
            Promise::NoDoubleSpend => "P2",
            Promise::LeaseExpiry => "P3",
            Promise::BoundedState => "P4",
            Promise::HonestAccounting => "P7",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Promise::BudgetBound => "budget bound",
            Promise::NoDoubleSpend => "no double spend",
            Promise::LeaseExpiry => "leases expire",
            Promise::BoundedState => "bounded state",
            Promise::HonestAccounting => "honest accounting",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Promise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code(), self.name())
    }
}

/// One observation of a broken promise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub promise: Promise,
    /// Simulated time of the observation.
    pub at_ns: u64,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.at_ns / 1_000_000;
        write!(f, "{} broken at {ms} ms: {}", self.promise, self.detail)
    }
}

/// Details kept per promise; later violations are only counted, so a badly broken run
/// cannot grow the log without bound.
pub const KEPT_PER_PROMISE_MAX: usize = 8;

/// Violations counted per promise, with the first few kept in full.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PromiseLog {
    counts: [u64; Promise::ALL.len()],
    kept: Vec<Violation>,
}

impl PromiseLog {
    /// Records a violation; `detail` is built only when the violation is kept.
    pub fn record(&mut self, promise: Promise, at_ns: u64, detail: impl FnOnce() -> String) {
        let n = &mut self.counts[promise.index()];
        *n += 1;
        if *n as usize <= KEPT_PER_PROMISE_MAX {
            self.kept.push(Violation {
                promise,
                at_ns,
                detail: detail(),
            });
        }
    }

    /// Violations of `promise` seen so far.
    pub fn count(&self, promise: Promise) -> u64 {
        self.counts[promise.index()]
    }

    /// The first violation of `promise`, if any.
    pub fn first(&self, promise: Promise) -> Option<&Violation> {
        self.kept.iter().find(|v| v.promise == promise)
    }

    /// The earliest recorded violation of any promise.
    pub fn first_any(&self) -> Option<&Violation> {
        self.kept.iter().min_by_key(|v| v.at_ns)
    }

    /// Every kept violation, in the order seen.
    pub fn kept(&self) -> &[Violation] {
        &self.kept
    }

    pub fn is_clean(&self) -> bool {
        self.counts.iter().all(|&n| n == 0)
    }

    /// Adds another log's counts and kept details to this one.
    pub fn merge(&mut self, other: &PromiseLog) {
        for v in &other.kept {
            if self.count(v.promise) < KEPT_PER_PROMISE_MAX as u64 {
                self.kept.push(v.clone());
            }
        }
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_violation_and_keeps_only_the_first_few() {
        let mut log = PromiseLog::default();
        for t in 0..20 {
            log.record(Promise::LeaseExpiry, t, || format!("spend at {t}"));
        }
        assert_eq!(log.count(Promise::LeaseExpiry), 20);
        assert_eq!(log.kept().len(), KEPT_PER_PROMISE_MAX);
        assert_eq!(log.first(Promise::LeaseExpiry).unwrap().at_ns, 0);
        assert!(!log.is_clean());
        assert_eq!(log.count(Promise::BudgetBound), 0);
    }
}
