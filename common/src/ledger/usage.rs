//! Usage per policy, key and holder in hourly buckets, for reconciling with billing.
//!
//! A grantor learns what its holders admitted only from their reports: cumulative figures
//! per lease (`used`, and the holder's refused, shaped and fail-open counts), so a retried or
//! duplicated report must add nothing. The book keeps the last holder counts seen per lease
//! and adds only their growth; admitted units are the growth of the ledger's own `used`,
//! which the ledger already accepts once. Credit a lease took with it when it expired
//! unreported is counted as spent, under `stranded`.
//!
//! Units land in the bucket of the time the grantor applied the report (the leader's stamped
//! time), not when the holder admitted them: a figure lags the traffic by at most one report
//! interval. Buckets older than the retention are dropped; the rows stored are capped, and
//! what a row past the cap would have held is added to its policy's overflow for that bucket,
//! so totals per policy stay whole even when per-key detail is lost.

use crate::lease::LeaseId;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Width of a usage bucket: one hour, aligned on UTC hours (so also on local hours of every
/// time zone with a whole-hour offset).
pub const USAGE_BUCKET_NS: u64 = 3_600 * 1_000_000_000;
/// Default retention: 40 days, so the previous calendar month is whole for a month.
pub const USAGE_RETENTION_HOURS_DEFAULT: u64 = 40 * 24;
/// Default cap on stored (bucket, policy, key, holder) rows.
pub const USAGE_ROWS_MAX_DEFAULT: usize = 500_000;
/// Lease marks kept before the marks of ended leases are dropped in one pass.
pub const USAGE_MARKS_PRUNE_AT_MIN: usize = 4_096;

/// Units in each column of a usage figure.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageCounts {
    /// Units holders reported spent under their leases.
    pub admitted: u64,
    /// Units holders turned down for this key.
    pub refused: u64,
    /// Units admitted after a delay.
    pub shaped: u64,
    /// Units admitted while the holder could not reach this grantor (not charged to credit).
    pub fail_open: u64,
    /// Units of leases that expired unreported, counted as spent.
    pub stranded: u64,
}

impl UsageCounts {
    pub fn add(&mut self, o: &UsageCounts) {
        self.admitted = self.admitted.saturating_add(o.admitted);
        self.refused = self.refused.saturating_add(o.refused);
        self.shaped = self.shaped.saturating_add(o.shaped);
        self.fail_open = self.fail_open.saturating_add(o.fail_open);
        self.stranded = self.stranded.saturating_add(o.stranded);
    }

    pub fn is_zero(&self) -> bool {
        *self == UsageCounts::default()
    }
}

/// A holder's own counts under one lease, cumulative over the lease's life.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderCounts {
    pub refused: u64,
    pub shaped: u64,
    pub fail_open: u64,
}

impl HolderCounts {
    pub fn is_zero(&self) -> bool {
        *self == HolderCounts::default()
    }

    /// Each count's growth over `last`, and the larger of both (a reordered older report
    /// lowers nothing).
    fn grown_since(&self, last: &HolderCounts) -> (HolderCounts, HolderCounts) {
        let grown = HolderCounts {
            refused: self.refused.saturating_sub(last.refused),
            shaped: self.shaped.saturating_sub(last.shaped),
            fail_open: self.fail_open.saturating_sub(last.fail_open),
        };
        let high = HolderCounts {
            refused: self.refused.max(last.refused),
            shaped: self.shaped.max(last.shaped),
            fail_open: self.fail_open.max(last.fail_open),
        };
        (grown, high)
    }
}

/// Who a usage row is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UsageSubject {
    pub policy_id: String,
    pub key: String,
    pub holder_id: String,
}

/// How much usage a book keeps.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageLimits {
    /// Buckets whose end is further back than this from the newest time are dropped.
    pub retention_hours: u64,
    /// Most rows stored over all buckets.
    pub rows_max: usize,
}

impl Default for UsageLimits {
    fn default() -> Self {
        UsageLimits {
            retention_hours: USAGE_RETENTION_HOURS_DEFAULT,
            rows_max: USAGE_ROWS_MAX_DEFAULT,
        }
    }
}

/// One row of a usage query: a key (and a holder when asked per holder) over the range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    pub key: String,
    /// Empty unless the query was per holder.
    pub holder_id: String,
    pub counts: UsageCounts,
}

/// What a usage query found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageReport {
    /// Start of the first bucket covered (the asked start rounded down to a bucket).
    pub since_ns: u64,
    /// End of the last bucket covered (the asked end rounded up to a bucket).
    pub until_ns: u64,
    /// Rows in key (then holder) order, at most the asked number.
    pub rows: Vec<UsageRow>,
    /// More rows matched than were returned.
    pub truncated: bool,
    /// Sum over every matching row, the ones not returned included, plus the overflow.
    pub total: UsageCounts,
    /// Units of the range whose rows were not stored because the row cap was reached.
    pub overflow: UsageCounts,
    /// Oldest bucket start still kept (0 when nothing is kept): a range starting earlier
    /// has lost what retention dropped.
    pub oldest_kept_ns: u64,
}

/// Usage per bucket, policy, key and holder, with per-lease marks of holder counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageBook {
    limits: UsageLimits,
    buckets: BTreeMap<u64, BTreeMap<UsageSubject, UsageCounts>>,
    rows_len: usize,
    /// Per (bucket, policy): units whose rows did not fit under the cap.
    overflow: BTreeMap<(u64, String), UsageCounts>,
    /// Rows refused by the cap, ever.
    overflow_rows: u64,
    marks: BTreeMap<LeaseId, HolderCounts>,
    marks_prune_at: usize,
}

impl Default for UsageBook {
    fn default() -> Self {
        UsageBook::new(UsageLimits::default())
    }
}

/// The start of the bucket holding `at_ns`.
pub fn bucket_of(at_ns: u64) -> u64 {
    at_ns - at_ns % USAGE_BUCKET_NS
}

impl UsageBook {
    pub fn new(limits: UsageLimits) -> Self {
        UsageBook {
            limits,
            buckets: BTreeMap::new(),
            rows_len: 0,
            overflow: BTreeMap::new(),
            overflow_rows: 0,
            marks: BTreeMap::new(),
            marks_prune_at: USAGE_MARKS_PRUNE_AT_MIN,
        }
    }

    pub fn limits(&self) -> UsageLimits {
        self.limits
    }

    /// Rows stored now, over all buckets.
    pub fn rows_len(&self) -> usize {
        self.rows_len
    }

    /// Rows the cap refused, ever.
    pub fn overflow_rows(&self) -> u64 {
        self.overflow_rows
    }

    /// Lease marks held now.
    pub fn marks_len(&self) -> usize {
        self.marks.len()
    }

    /// Adds `counts` for `who` to the bucket of `at`.
    pub fn record(&mut self, at: Nanos, who: &UsageSubject, counts: &UsageCounts) {
        if counts.is_zero() {
            return;
        }
        let bucket = bucket_of(at.0);
        let rows = self.buckets.entry(bucket).or_default();
        if let Some(row) = rows.get_mut(who) {
            row.add(counts);
            return;
        }
        if self.rows_len < self.limits.rows_max {
            rows.insert(who.clone(), *counts);
            self.rows_len += 1;
            return;
        }
        if rows.is_empty() {
            self.buckets.remove(&bucket);
        }
        self.overflow_rows += 1;
        self.overflow
            .entry((bucket, who.policy_id.clone()))
            .or_default()
            .add(counts);
    }

    /// Takes `admitted` units back out of `who`'s row in the bucket of `at` (a decision
    /// refunded after another dimension of its request refused): as far as that row, or
    /// its policy's overflow for the bucket, holds them. Returns the units taken back.
    pub fn take_back(&mut self, at: Nanos, who: &UsageSubject, admitted: u64) -> u64 {
        let bucket = bucket_of(at.0);
        let row = match self.buckets.get_mut(&bucket).and_then(|r| r.get_mut(who)) {
            Some(row) => Some(row),
            None => self.overflow.get_mut(&(bucket, who.policy_id.clone())),
        };
        row.map_or(0, |c| {
            let taken = admitted.min(c.admitted);
            c.admitted -= taken;
            taken
        })
    }

    /// The growth of a lease's holder counts since its last accepted report, remembering
    /// the new ones: a repeated report adds nothing, a reordered older one lowers nothing.
    /// `live` says which leases still exist, for dropping the marks of ended ones.
    pub fn holder_growth(
        &mut self,
        lease_id: LeaseId,
        counts: HolderCounts,
        live: impl Fn(LeaseId) -> bool,
    ) -> HolderCounts {
        let last = self.marks.get(&lease_id).copied().unwrap_or_default();
        let (grown, high) = counts.grown_since(&last);
        if !high.is_zero() {
            self.marks.insert(lease_id, high);
        }
        if self.marks.len() >= self.marks_prune_at {
            self.marks.retain(|id, _| live(*id));
            self.marks_prune_at = (2 * self.marks.len()).max(USAGE_MARKS_PRUNE_AT_MIN);
        }
        grown
    }

    /// Forgets a lease's holder counts: it ended and can report no more.
    pub fn forget_lease(&mut self, lease_id: LeaseId) {
        self.marks.remove(&lease_id);
    }

    /// Drops buckets that ended more than the retention before `now`.
    pub fn prune(&mut self, now: Nanos) {
        let keep_ns = self.limits.retention_hours.saturating_mul(USAGE_BUCKET_NS);
        let Some(oldest_end) = now.0.checked_sub(keep_ns) else {
            return;
        };
        // A bucket starting at `b` ends at `b + width`; keep it while that end is recent.
        let cut = oldest_end.saturating_sub(USAGE_BUCKET_NS - 1);
        while let Some((&b, _)) = self.buckets.first_key_value() {
            if b >= cut {
                break;
            }
            let (_, rows) = self.buckets.pop_first().expect("seen above");
            self.rows_len -= rows.len();
        }
        while let Some(((b, _), _)) = self.overflow.first_key_value() {
            if *b >= cut {
                break;
            }
            self.overflow.pop_first();
        }
    }

    /// Usage of `policy_id` (of one key if given) over the buckets overlapping
    /// `[since_ns, until_ns)`, per key or per key and holder, at most `rows_max` rows.
    pub fn query(&self, q: &UsageQuery<'_>) -> UsageReport {
        let since = bucket_of(q.since_ns);
        let until = bucket_of(q.until_ns.saturating_add(USAGE_BUCKET_NS - 1));
        let mut by_row: BTreeMap<(String, String), UsageCounts> = BTreeMap::new();
        let mut total = UsageCounts::default();
        let start = UsageSubject {
            policy_id: q.policy_id.to_string(),
            key: q.key.unwrap_or("").to_string(),
            holder_id: String::new(),
        };
        for rows in self.buckets.range(since..until).map(|(_, r)| r) {
            let matching = rows.range(&start..).take_while(|(s, _)| {
                s.policy_id == q.policy_id && q.key.is_none_or(|k| s.key == k)
            });
            for (s, c) in matching {
                total.add(c);
                let holder = if q.per_holder { &s.holder_id } else { "" };
                let row = (s.key.clone(), holder.to_string());
                by_row.entry(row).or_default().add(c);
            }
        }
        let mut overflow = UsageCounts::default();
        for ((b, p), c) in &self.overflow {
            if (since..until).contains(b) && p == q.policy_id {
                overflow.add(c);
            }
        }
        total.add(&overflow);
        let truncated = by_row.len() > q.rows_max;
        let rows = by_row
            .into_iter()
            .take(q.rows_max)
            .map(|((key, holder_id), counts)| UsageRow {
                key,
                holder_id,
                counts,
            })
            .collect();
        UsageReport {
            since_ns: since,
            until_ns: until,
            rows,
            truncated,
            total,
            overflow,
            oldest_kept_ns: self.buckets.keys().next().copied().unwrap_or(0),
        }
    }
}

/// What a usage query asks for.
#[derive(Clone, Debug)]
pub struct UsageQuery<'a> {
    pub policy_id: &'a str,
    pub key: Option<&'a str>,
    pub since_ns: u64,
    pub until_ns: u64,
    pub per_holder: bool,
    pub rows_max: usize,
}

#[cfg(test)]
mod tests;
