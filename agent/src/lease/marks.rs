//! How much of a lease's credit the slot may hold, given the durable mark (sans-IO).
//!
//! The slot never holds more than the mark allows: `in_slot ≤ min(credit, mark)`. Spending
//! is bounded by `in_slot`, so whatever was spent is at most the durable mark. Marks are
//! raised a chunk ahead of spending, so one disk flush covers many admissions and the hot
//! path never waits for the disk; it only runs dry if a chunk is spent within one tick.

/// One lease's credit as the lease manager accounts for it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowance {
    /// Credit the grantor holds for this holder: granted minus handed back.
    pub credit: u64,
    /// Units put into the slot, net of units taken out again.
    pub in_slot: u64,
    /// The durable mark; `u64::MAX` when there is no state file.
    pub mark: u64,
}

/// No state file: every unit of credit may go to the slot at once.
pub const MARK_UNBOUNDED: u64 = u64::MAX;

impl Allowance {
    /// The mark to make durable before the next deposit, if the current one is too low:
    /// `spent + chunk`, never above the credit. A mark above the credit (credit handed
    /// back) is lowered to it, but never below what the slot holds.
    pub fn mark_wanted(&self, spent: u64, chunk: u64) -> Option<u64> {
        if self.mark == MARK_UNBOUNDED {
            return None;
        }
        let cap = self.credit.max(self.in_slot);
        if self.mark > cap {
            return Some(cap);
        }
        let ahead = self.mark.saturating_sub(spent);
        let target = spent.saturating_add(chunk).min(self.credit);
        (2 * ahead < chunk && target > self.mark).then_some(target)
    }

    /// Units that may go into the slot now.
    pub fn depositable(&self) -> u64 {
        self.credit.min(self.mark).saturating_sub(self.in_slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn without_a_state_file_all_credit_goes_in() {
        let a = Allowance {
            credit: 500,
            in_slot: 100,
            mark: MARK_UNBOUNDED,
        };
        assert_eq!(a.mark_wanted(50, 10), None);
        assert_eq!(a.depositable(), 400);
    }

    #[test]
    fn a_fresh_lease_gets_one_chunk() {
        let a = Allowance {
            credit: 500,
            in_slot: 0,
            mark: 0,
        };
        assert_eq!(a.mark_wanted(0, 64), Some(64));
        assert_eq!(a.depositable(), 0, "nothing before the mark is durable");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Grant(u64),
        Spend(u64),
        Return(u64),
        Crash,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..300).prop_map(Op::Grant),
            (0u64..100).prop_map(Op::Spend),
            (0u64..100).prop_map(Op::Return),
            Just(Op::Crash),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]
        /// Driven the way the lease manager drives it (flush, then deposit), spending never
        /// passes the durable mark, and a restart that counts each lease as spent up to its
        /// mark never counts more than the grantor's credit.
        #[test]
        fn spending_never_passes_the_durable_mark(
            ops in prop::collection::vec(op(), 1..60),
            chunk in 1u64..200,
        ) {
            let mut a = Allowance::default();
            let mut spent = 0u64;
            let mut durable = 0u64;
            for op in ops {
                match op {
                    Op::Grant(n) => a.credit += n,
                    Op::Spend(n) => spent += n.min(a.in_slot - spent),
                    Op::Return(n) => {
                        // Handed back from what the slot holds unspent, or held back.
                        let n = n.min(a.credit - spent);
                        let from_slot = n.saturating_sub(a.credit - a.in_slot);
                        a.in_slot -= from_slot;
                        a.credit -= n;
                    }
                    Op::Crash => {
                        prop_assert!(spent <= durable, "spent {spent} > mark {durable}");
                        prop_assert!(durable <= a.credit.max(a.in_slot));
                    }
                }
                if let Some(m) = a.mark_wanted(spent, chunk) {
                    prop_assert!(m >= a.in_slot, "a mark below the slot's credit");
                    durable = m;
                    a.mark = m;
                }
                a.in_slot += a.depositable();
                prop_assert!(a.in_slot <= durable);
                prop_assert!(spent <= durable);
            }
        }
    }
}
