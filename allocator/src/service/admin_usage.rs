//! The admin service's usage call: what holders reported per policy, key and holder over a
//! range or a calendar quota's period.

use super::AdminServer;
use crate::replica::Replica;
use crate::state::AllocatorState;
use leasehold_common::ledger::usage::USAGE_BUCKET_NS;
use leasehold_common::ledger::{UsageCounts, UsageQuery, WindowSpec};
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use tonic::Status;

/// Most rows one answer carries; `total` still covers every row.
pub const USAGE_ROWS_MAX: usize = 10_000;

const NS_PER_MS: u64 = 1_000_000;

impl<R: Replica<AllocatorState>> AdminServer<R> {
    /// `Usage`: a linearizable read of the usage book.
    pub(super) async fn usage_call(
        &self,
        r: pb::UsageRequest,
    ) -> Result<pb::UsageResponse, Status> {
        let period = pb::UsagePeriod::try_from(r.period)
            .map_err(|_| Status::invalid_argument(format!("period {}: unknown", r.period)))?;
        if period == pb::UsagePeriod::Unspecified && r.until_ms <= r.since_ms {
            return Err(Status::invalid_argument(format!(
                "since_ms {} / until_ms {}: the range must end after it starts",
                r.since_ms, r.until_ms
            )));
        }
        self.read(move |s| usage(s, &r, period)).await?
    }
}

fn usage(
    s: &AllocatorState,
    r: &pb::UsageRequest,
    period: pb::UsagePeriod,
) -> Result<pb::UsageResponse, Status> {
    let ledger = s.ledger();
    let params = ledger.policy(&r.policy_id).ok_or_else(|| {
        Status::not_found(format!(
            "no leased policy '{}' on this allocator",
            r.policy_id
        ))
    })?;
    let now = ledger.now();
    let (since_ns, until_ns) = match period {
        pb::UsagePeriod::Unspecified => (
            r.since_ms.saturating_mul(NS_PER_MS),
            r.until_ms.saturating_mul(NS_PER_MS),
        ),
        pb::UsagePeriod::Current | pb::UsagePeriod::Previous => {
            let Some(spec @ WindowSpec::Calendar { .. }) = &params.window else {
                return Err(Status::invalid_argument(format!(
                    "policy '{}' is not a calendar_quota policy: it has no calendar period; \
                     give since and until",
                    r.policy_id
                )));
            };
            let current = spec.bounds(now);
            let (start, end) = if period == pb::UsagePeriod::Current {
                current
            } else {
                spec.bounds(Nanos(current.0 .0.saturating_sub(1)))
            };
            if end == Nanos::MAX {
                return Err(Status::failed_precondition(format!(
                    "policy '{}': its calendar period cannot be computed in its time zone",
                    r.policy_id
                )));
            }
            (start.0, end.0)
        }
    };
    let limit = match r.limit as usize {
        0 => USAGE_ROWS_MAX,
        n => n.min(USAGE_ROWS_MAX),
    };
    let report = s.usage().query(&UsageQuery {
        policy_id: &r.policy_id,
        key: (!r.key.is_empty()).then_some(r.key.as_str()),
        since_ns,
        until_ns,
        per_holder: r.per_holder,
        rows_max: limit,
    });
    Ok(pb::UsageResponse {
        policy_id: r.policy_id.clone(),
        since_ms: report.since_ns / NS_PER_MS,
        until_ms: report.until_ns / NS_PER_MS,
        bucket_ms: USAGE_BUCKET_NS / NS_PER_MS,
        rows: report
            .rows
            .into_iter()
            .map(|row| pb::UsageRow {
                key: row.key,
                holder_id: row.holder_id,
                counts: Some(counts_pb(&row.counts)),
            })
            .collect(),
        truncated: report.truncated,
        total: Some(counts_pb(&report.total)),
        overflow: Some(counts_pb(&report.overflow)),
        oldest_kept_ms: report.oldest_kept_ns / NS_PER_MS,
        retention_hours: s.usage().limits().retention_hours,
        report_lag_max_ms: params
            .lease
            .ttl_ms
            .saturating_add(ledger.config().expiry_grace_ms),
        now_ms: now.0 / NS_PER_MS,
    })
}

fn counts_pb(c: &UsageCounts) -> pb::UsageCounts {
    pb::UsageCounts {
        admitted: c.admitted,
        refused: c.refused,
        shaped: c.shaped,
        fail_open: c.fail_open,
        stranded: c.stranded,
    }
}
