//! Would-deny counts of shadow-mode policies, summed from holders' reports.
//!
//! Holders report a cumulative count per lease (like `used`), so a retried or reordered
//! report never counts twice: only the growth since the lease's last report is added.
//! Counts are kept for one version per policy, the newest any lease reported under; a
//! report under an older version adds nothing, since it judged traffic by other limits.

use leasehold_common::ledger::Ledger;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Lease marks kept before the ones of ended leases are dropped.
pub const SHADOW_MARKS_PRUNE_AT_MIN: usize = 4_096;

/// A policy version's would-deny count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowTally {
    pub version: u64,
    /// Requests the policy would have denied, summed over its holders.
    pub would_deny_requests: u64,
    /// Replicated time of the first report under this version, in nanoseconds.
    pub since_ns: u64,
}

/// Would-deny tallies per policy, and the last count seen per lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowBook {
    tallies: BTreeMap<String, ShadowTally>,
    marks: BTreeMap<u64, u64>,
    prune_at: usize,
}

impl Default for ShadowBook {
    fn default() -> Self {
        ShadowBook {
            tallies: BTreeMap::new(),
            marks: BTreeMap::new(),
            prune_at: SHADOW_MARKS_PRUNE_AT_MIN,
        }
    }
}

impl ShadowBook {
    /// Books a report of `would_deny` (cumulative) on a live lease of `ledger`, at `now_ns`.
    pub fn record(&mut self, ledger: &Ledger, lease_id: u64, would_deny: u64, now_ns: u64) {
        let Some(rec) = ledger.lease(lease_id) else {
            return;
        };
        let (policy_id, version) = (&rec.lease.policy_id, rec.lease.policy_version);
        let last = self.marks.insert(lease_id, would_deny).unwrap_or(0);
        let grown = would_deny.saturating_sub(last);
        let tally = self
            .tallies
            .entry(policy_id.clone())
            .or_insert_with(|| ShadowTally {
                version,
                would_deny_requests: 0,
                since_ns: now_ns,
            });
        if version > tally.version {
            *tally = ShadowTally {
                version,
                would_deny_requests: 0,
                since_ns: now_ns,
            };
        }
        if version == tally.version {
            tally.would_deny_requests = tally.would_deny_requests.saturating_add(grown);
        }
        if self.marks.len() >= self.prune_at {
            self.marks.retain(|id, _| ledger.lease(*id).is_some());
            self.prune_at = (2 * self.marks.len()).max(SHADOW_MARKS_PRUNE_AT_MIN);
        }
    }

    /// The tally of `policy_id` when it is for `version`.
    pub fn tally(&self, policy_id: &str, version: u64) -> Option<&ShadowTally> {
        self.tallies.get(policy_id).filter(|t| t.version == version)
    }

    /// Lease marks held now (bounded: ended leases' marks are dropped in batches).
    pub fn marks_len(&self) -> usize {
        self.marks.len()
    }
}
