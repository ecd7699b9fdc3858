//! `LeaseBatch`: many acquires, reports and releases of one holder in one call, applied as
//! one replicated command.
//!
//! A region that holds upstream leases on thousands of keys would otherwise send one call,
//! and cost its grantor one command, per key per report interval. In a batch the call's
//! fixed costs (TLS records, an HTTP/2 stream, authorisation) and the proposal are paid
//! once; the ledger still applies every call as its own.

use super::call_counts::{CallKind as Kind, LeaseCallCounts};
use super::convert::replica_status;
use super::lease_calls::{
    acquire_answer, acquire_command, last_request_id, ledger_outcome, release_answer,
    release_command, report_answer, report_command, Signing,
};
use crate::replica::Replica;
use crate::state::{AllocatorState, StateCommand, StateOutput};
use leasehold_client::LEASE_BATCH_ITEMS_MAX;
use leasehold_proto::leasehold::v1 as pb;
use pb::lease_batch_item::Call;
use pb::lease_batch_outcome::Outcome;
use tonic::Status;

/// Applies `r`'s calls as one command and answers each. The whole call fails only when
/// nothing was applied (a malformed batch, no leader, no quorum).
pub(crate) async fn lease_batch<R: Replica<AllocatorState>>(
    replica: &R,
    signer: Signing<'_>,
    counts: &LeaseCallCounts,
    r: pb::LeaseBatchRequest,
) -> Result<pb::LeaseBatchResponse, Status> {
    let (kinds, commands) = commands(r)?;
    let out = replica
        .propose(StateCommand::LeaseCalls(commands))
        .await
        .map_err(replica_status)?;
    let StateOutput::Batch(outputs) = out else {
        return Err(Status::internal(format!("unexpected answer {out:?}")));
    };
    if outputs.len() != kinds.len() {
        return Err(Status::internal(format!(
            "a batch of {} calls was answered with {} outputs",
            kinds.len(),
            outputs.len()
        )));
    }
    let outcomes = kinds
        .into_iter()
        .zip(outputs)
        .map(|(kind, out)| {
            counts.count(kind, true);
            pb::LeaseBatchOutcome {
                outcome: Some(answer(signer, kind, out)),
            }
        })
        .collect();
    Ok(pb::LeaseBatchResponse { outcomes })
}

fn commands(r: pb::LeaseBatchRequest) -> Result<(Vec<Kind>, Vec<StateCommand>), Status> {
    let n = r.items.len();
    if n == 0 || n > LEASE_BATCH_ITEMS_MAX {
        return Err(Status::invalid_argument(format!(
            "items: {n} given; a lease batch carries 1 to {LEASE_BATCH_ITEMS_MAX}"
        )));
    }
    let holder = r.holder_id;
    let mut kinds = Vec::with_capacity(n);
    let mut commands = Vec::with_capacity(n);
    for (i, item) in r.items.into_iter().enumerate() {
        let (kind, command) = match item.call {
            Some(Call::Acquire(mut a)) => {
                same_holder(i, &mut a.holder_id, &holder)?;
                (Kind::Acquire, acquire_command(&a))
            }
            Some(Call::Report(mut p)) => {
                same_holder(i, &mut p.holder_id, &holder)?;
                (Kind::Report, report_command(&p))
            }
            Some(Call::Release(mut l)) => {
                same_holder(i, &mut l.holder_id, &holder)?;
                (Kind::Release, release_command(&l))
            }
            None => {
                return Err(Status::invalid_argument(format!(
                    "items[{i}]: names no call (acquire, report or release)"
                )))
            }
        };
        kinds.push(kind);
        commands.push(command);
    }
    Ok((kinds, commands))
}

/// A call's holder is the batch's: empty means the batch's, anything else is refused.
fn same_holder(i: usize, call_holder: &mut String, holder: &str) -> Result<(), Status> {
    if call_holder.is_empty() {
        *call_holder = holder.to_string();
    }
    if call_holder != holder {
        return Err(Status::invalid_argument(format!(
            "items[{i}].holder_id: '{call_holder}' differs from the batch's '{holder}'"
        )));
    }
    Ok(())
}

fn answer(signer: Signing<'_>, kind: Kind, out: StateOutput) -> Outcome {
    let answered = ledger_outcome(out).and_then(|o| match kind {
        Kind::Acquire => acquire_answer(signer, o).map(Outcome::Acquired),
        Kind::Report => report_answer(signer, o).map(Outcome::Reported),
        Kind::Release => release_answer(o).map(Outcome::Released),
    });
    answered.unwrap_or_else(|s| Outcome::Failed(failure(&s)))
}

fn failure(s: &Status) -> pb::DecideFailure {
    pb::DecideFailure {
        code: s.code() as i32,
        message: s.message().to_string(),
        last_request_id: last_request_id(s).unwrap_or(0),
    }
}
