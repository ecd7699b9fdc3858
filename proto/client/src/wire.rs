//! Leases between their ledger form and their wire form.

use leasehold_common::lease::Lease;
use leasehold_common::ledger::{Acquire, DecideItem, Decided, DenyReason, Release, Report};
use leasehold_proto::leasehold::v1 as pb;

pub fn lease_to_pb(l: &Lease) -> pb::Lease {
    pb::Lease {
        lease_id: l.lease_id,
        grantor_id: l.grantor_id.clone(),
        policy_id: l.policy_id.clone(),
        policy_version: l.policy_version,
        key: l.key.clone(),
        holder_id: l.holder_id.clone(),
        credit: l.credit,
        epoch: l.epoch,
        issued_at_ns: l.issued_at_ns,
        ttl_ms: l.ttl_ms,
        generation: l.generation,
        parent_lease_id: l.parent_lease_id,
        key_id: l.key_id.clone(),
        signature: l.signature.clone(),
    }
}

pub fn lease_from_pb(l: &pb::Lease) -> Lease {
    Lease {
        lease_id: l.lease_id,
        grantor_id: l.grantor_id.clone(),
        policy_id: l.policy_id.clone(),
        policy_version: l.policy_version,
        key: l.key.clone(),
        holder_id: l.holder_id.clone(),
        credit: l.credit,
        epoch: l.epoch,
        issued_at_ns: l.issued_at_ns,
        ttl_ms: l.ttl_ms,
        generation: l.generation,
        parent_lease_id: l.parent_lease_id,
        key_id: l.key_id.clone(),
        signature: l.signature.clone(),
    }
}

/// Why the ledger granted nothing, as the lease protocol says it.
pub fn deny_to_pb(r: DenyReason) -> pb::DenyReason {
    match r {
        DenyReason::Exhausted | DenyReason::MaxCredit => pb::DenyReason::Exhausted,
        DenyReason::FairShare => pb::DenyReason::FairShare,
        DenyReason::ReserveOnly => pb::DenyReason::ReserveOnly,
    }
}

/// A decision's items as the ledger takes them.
pub fn decide_items(items: &[pb::DecideItem]) -> Vec<DecideItem> {
    items
        .iter()
        .map(|i| DecideItem {
            policy_id: i.policy_id.clone(),
            key: i.key.clone(),
            units: i.units,
        })
        .collect()
}

/// A ledger's decision as the wire carries it (milliseconds rounded up, so a holder never
/// retries early).
pub fn decided_to_pb(d: &Decided) -> pb::DecideResponse {
    let ms = |ns: u64| ns.div_ceil(1_000_000);
    pb::DecideResponse {
        admitted: d.admitted,
        verdicts: d
            .verdicts
            .iter()
            .map(|v| pb::DecideVerdict {
                fits: v.fits,
                remaining: v.remaining,
                reset_after_ms: ms(v.reset_after_ns),
                retry_after_ms: ms(v.retry_after_ns),
            })
            .collect(),
        decided_at_ns: d.at.0,
    }
}

/// The ledger's acquire for a holder's request.
pub fn acquire_from_pb(r: &pb::AcquireRequest) -> Acquire {
    Acquire {
        holder_id: r.holder_id.clone(),
        policy_id: r.policy_id.clone(),
        key: r.key.clone(),
        want_credit: r.want_credit,
        demand_milli_per_sec: r.demand_milli_units_per_sec,
        request_id: r.request_id,
        priority: r.priority,
    }
}

/// The ledger's report for a holder's request (reports carry no priority of their own).
pub fn report_from_pb(r: &pb::ReportRequest) -> Report {
    Report {
        holder_id: r.holder_id.clone(),
        lease_id: r.lease_id,
        used: r.used,
        return_credit: r.return_credit,
        want_credit: r.want_credit,
        demand_milli_per_sec: r.demand_milli_units_per_sec,
        request_id: r.request_id,
        priority: 0,
    }
}

/// The ledger's release for a holder's request.
pub fn release_from_pb(r: &pb::ReleaseRequest) -> Release {
    Release {
        holder_id: r.holder_id.clone(),
        lease_id: r.lease_id,
        final_used: r.final_used,
        request_id: r.request_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field crosses the wire unchanged: a signature covers them all, so one that
    /// changed on the way would make the holder refuse the lease.
    #[test]
    fn a_lease_survives_the_round_trip() {
        let lease = Lease {
            lease_id: 1,
            grantor_id: "global".into(),
            policy_id: "api".into(),
            policy_version: 2,
            key: "tenant=acme".into(),
            holder_id: "gw-1".into(),
            credit: 3,
            epoch: 4,
            issued_at_ns: 5,
            ttl_ms: 6,
            generation: 7,
            parent_lease_id: Some(8),
            key_id: "k1".into(),
            signature: vec![9; 64],
        };
        assert_eq!(lease_from_pb(&lease_to_pb(&lease)), lease);
        let none = Lease {
            parent_lease_id: None,
            ..lease
        };
        assert_eq!(lease_from_pb(&lease_to_pb(&none)), none);
    }

    #[test]
    fn retry_times_round_up_to_the_millisecond() {
        let d = Decided {
            admitted: false,
            verdicts: vec![leasehold_common::ledger::Verdict {
                fits: false,
                remaining: 0,
                reset_after_ns: 1,
                retry_after_ns: 1_000_001,
            }],
            at: leasehold_common::time::Nanos(9),
        };
        let pb = decided_to_pb(&d);
        assert_eq!(pb.verdicts[0].reset_after_ms, 1);
        assert_eq!(pb.verdicts[0].retry_after_ms, 2);
        assert_eq!(pb.decided_at_ns, 9);
    }
}
