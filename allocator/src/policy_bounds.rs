//! The fleet-wide bound of policies whose admissions the metrics can check against it.
//!
//! Agents count admitted units per policy, never per key (P4), so their sum can be held to
//! `burst + rate × T` only for a policy with a single key: one without dimensions. Those
//! bounds are exported beside the ledger figures for the `LeaseholdAdmittedAboveBound`
//! alert; a policy with keys per tenant has one bound per key, which no per-policy series
//! can check.

use leasehold_common::ledger::Ledger;
use leasehold_common::policy::PolicySet;

/// One single-key policy's `rate` and `burst` as the ledger enforces them (a window's
/// limit per window length and its limit), and the level owning its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyBound {
    pub rate_milli_per_sec: u64,
    pub burst: u64,
    pub scope: &'static str,
}

/// Bounds of the current single-key policies that the ledger holds and that have a
/// budget (concurrency limits and envoyproxy/ratelimit domains have none of this form).
pub fn policy_bounds(ledger: &Ledger, policies: &PolicySet) -> Vec<(String, PolicyBound)> {
    policies
        .current()
        .filter(|v| v.policy.dimensions.is_empty() && v.policy.ratelimit.is_none())
        .filter_map(|v| {
            let p = ledger.policy(&v.policy.id)?;
            let bound = PolicyBound {
                rate_milli_per_sec: p.rate.milli_per_sec(),
                burst: p.burst,
                scope: p.owner.name(),
            };
            Some((v.policy.id.clone(), bound))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_common::ledger::{Command, LedgerConfig, PolicyParams};
    use leasehold_common::policy::{Policy, PolicySetLimits};
    use leasehold_common::time::Nanos;

    fn state(yamls: &[&str]) -> (Ledger, PolicySet) {
        let mut ledger = Ledger::new(LedgerConfig::root("g"));
        let mut set = PolicySet::new(PolicySetLimits::default());
        for yaml in yamls {
            let policy = Policy::from_yaml(yaml).unwrap();
            let params = PolicyParams::from_policy(&policy, 1).unwrap();
            ledger.apply(Nanos(0), Command::PutPolicy(params)).unwrap();
            set.apply(policy).unwrap();
        }
        (ledger, set)
    }

    #[test]
    fn only_single_key_policies_have_a_checkable_bound() {
        let (ledger, set) = state(&[
            "id: all\nrate: {units: 50, per: 1s}\nburst: 20\nscope: global\n",
            "id: win\nalgorithm: fixed_window\nrate: {units: 600, per: 1m}\nscope: region\n",
            "id: tenants\ndimensions: [{name: tenant}]\nrate: {units: 5, per: 1s}\nburst: 5\nscope: global\n",
        ]);
        let bounds = policy_bounds(&ledger, &set);
        let expected = [
            (
                "all".to_owned(),
                PolicyBound {
                    rate_milli_per_sec: 50_000,
                    burst: 20,
                    scope: "global",
                },
            ),
            (
                "win".to_owned(),
                PolicyBound {
                    rate_milli_per_sec: 10_000,
                    burst: 600,
                    scope: "region",
                },
            ),
        ];
        assert_eq!(bounds, expected);
    }

    #[test]
    fn bounds_are_exported_per_policy_and_scope() {
        use crate::metrics::{figures_with_bounds, AllocatorMetrics, FiguresSource};
        use std::sync::Arc;
        let (ledger, set) =
            state(&["id: all\nrate: {units: 50, per: 1s}\nburst: 20\nscope: global\n"]);
        let figures = figures_with_bounds(&ledger, &set);
        let source: FiguresSource = Arc::new(move || figures.clone());
        let text = AllocatorMetrics::new(source, Default::default()).render();
        for line in [
            "leasehold_policy_rate_units_per_second{policy=\"all\",scope=\"global\"} 50.0",
            "leasehold_policy_burst_units{policy=\"all\",scope=\"global\"} 20.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }
}
