//! A holder's acquire, report and release: the replicated command each request becomes and
//! the response each outcome becomes. Single calls and `LeaseBatch` share them, so a call
//! in a batch is answered exactly as its own call would be.

use super::call_counts::{CallKind, LeaseCallCounts};
use super::convert::{deny_to_pb, lease_to_pb, ledger_status, replica_status};
use crate::replica::Replica;
use crate::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_client::wire::{acquire_from_pb, release_from_pb, report_from_pb};
use leasehold_common::lease::{Lease, LeaseSigner};
use leasehold_common::ledger::{HolderCounts, Outcome};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::LAST_REQUEST_ID_METADATA_KEY;
use tonic::Status;

fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

/// Who signs the leases a grantor answers with: the cluster's key, or nobody for an
/// in-process grantor whose holders verify nothing (a simulation at scale, where a
/// signature per lease version would cost more than everything else it measures).
pub type Signing<'a> = Option<&'a LeaseSigner>;

fn signed(signer: Signing<'_>, mut lease: Lease) -> pb::Lease {
    if let Some(signer) = signer {
        signer.sign(&mut lease);
    }
    lease_to_pb(&lease)
}

/// Proposes a holder's call: its ledger outcome, or the status the call fails with. A call
/// the ledger applied is counted, whether it granted or refused.
pub(super) async fn propose_outcome<R: Replica<AllocatorState>>(
    replica: &R,
    counts: &LeaseCallCounts,
    kind: CallKind,
    command: StateCommand,
) -> Result<Outcome, Status> {
    let out = replica.propose(command).await.map_err(replica_status)?;
    counts.count(kind, false);
    ledger_outcome(out)
}

/// The last request id a stale-request status names (see `ledger_status`).
pub(super) fn last_request_id(s: &Status) -> Option<u64> {
    s.metadata()
        .get(LAST_REQUEST_ID_METADATA_KEY)
        .and_then(|v| v.to_str().ok()?.parse().ok())
}

/// The ledger's outcome in a command's output, or the status a call fails with.
pub(super) fn ledger_outcome(out: StateOutput) -> Result<Outcome, Status> {
    match out {
        StateOutput::Ledger(Ok(o)) => Ok(o),
        StateOutput::Ledger(Err(e)) => Err(ledger_status(&e)),
        other => Err(Status::internal(format!("unexpected answer {other:?}"))),
    }
}

/// The holder's own counts a request carries (each request type has the same three).
fn holder_counts(refused: u64, shaped: u64, fail_open: u64) -> HolderCounts {
    HolderCounts {
        refused,
        shaped,
        fail_open,
    }
}

pub(super) fn acquire_command(r: &pb::AcquireRequest) -> StateCommand {
    let acquire = acquire_from_pb(r);
    let counts = holder_counts(r.refused_units, r.shaped_units, r.fail_open_units);
    StateCommand::acquire(acquire, counts)
}

pub(super) fn acquire_answer(
    signer: Signing<'_>,
    outcome: Outcome,
) -> Result<pb::AcquireResponse, Status> {
    match outcome {
        Outcome::Granted(g) => Ok(pb::AcquireResponse {
            lease: Some(signed(signer, g.lease)),
            ..Default::default()
        }),
        Outcome::Denied {
            reason,
            retry_after_ns,
        } => Ok(pb::AcquireResponse {
            retry_after_ms: ms(retry_after_ns),
            deny_reason: deny_to_pb(reason) as i32,
            ..Default::default()
        }),
        other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
    }
}

pub(super) fn report_command(r: &pb::ReportRequest) -> StateCommand {
    let report = report_from_pb(r);
    let counts = holder_counts(r.refused_units, r.shaped_units, r.fail_open_units);
    StateCommand::report(report, r.shadow_would_deny, counts)
}

pub(super) fn report_answer(
    signer: Signing<'_>,
    outcome: Outcome,
) -> Result<pb::ReportResponse, Status> {
    match outcome {
        Outcome::Granted(g) => {
            let g = *g;
            Ok(pb::ReportResponse {
                lease: Some(signed(signer, g.lease)),
                replacement: g.replacement.map(|l| signed(signer, *l)),
                retry_after_ms: ms(g.retry_after_ns),
                ..Default::default()
            })
        }
        other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
    }
}

pub(super) fn release_command(r: &pb::ReleaseRequest) -> StateCommand {
    let release = release_from_pb(r);
    let counts = holder_counts(r.refused_units, r.shaped_units, r.fail_open_units);
    StateCommand::release(release, counts)
}

pub(super) fn release_answer(outcome: Outcome) -> Result<pb::ReleaseResponse, Status> {
    match outcome {
        Outcome::Released {
            reclaimed,
            stranded,
        } => Ok(pb::ReleaseResponse {
            reclaimed,
            stranded,
        }),
        other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
    }
}
