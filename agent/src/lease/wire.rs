//! Leases between their ledger form and their wire form.

use leasehold_common::lease::Lease;
use leasehold_common::ledger::DenyReason;
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
