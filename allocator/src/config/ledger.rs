//! `ledger:` of a node's configuration: the bounds of the replicated ledger's state.

use super::{invalid, ConfigError};
use leasehold_common::ledger::LedgerLimits;
use serde::{Deserialize, Serialize};

/// Most keys and live leases the cluster's ledger holds; a new key or lease past them is
/// refused (`RESOURCE_EXHAUSTED`), so a holder spraying keys cannot grow the state
/// without bound. Part of the replicated state from the cluster's first start: give every
/// node the same values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerSettings {
    pub keys_max: usize,
    pub leases_max: usize,
}

/// Allowed `ledger.keys_max` and `ledger.leases_max`: a thousand to a hundred million.
pub const LEDGER_BOUND_RANGE: std::ops::RangeInclusive<usize> = 1_000..=100_000_000;

impl Default for LedgerSettings {
    fn default() -> Self {
        let d = LedgerLimits::default();
        LedgerSettings {
            keys_max: d.keys_max,
            leases_max: d.leases_max,
        }
    }
}

impl LedgerSettings {
    /// The ledger's limits with these bounds.
    pub fn limits(&self) -> LedgerLimits {
        LedgerLimits {
            keys_max: self.keys_max,
            leases_max: self.leases_max,
            ..LedgerLimits::default()
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("ledger.keys_max", self.keys_max),
            ("ledger.leases_max", self.leases_max),
        ] {
            if !LEDGER_BOUND_RANGE.contains(&value) {
                return Err(invalid(
                    field,
                    format!("{value}: must be 1000 to 100000000"),
                ));
            }
        }
        Ok(())
    }
}
