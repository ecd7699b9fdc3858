//! Between ledger and state types and their wire messages; errors to gRPC statuses.

use crate::replica::ReplicaError;
use crate::state::{AdminError, Emergency, EmergencyMode};
pub use leasehold_client::wire::{deny_to_pb, lease_from_pb, lease_to_pb};
use leasehold_common::ledger::LedgerError;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::LEADER_METADATA_KEY;
use tonic::{Code, Status};

pub fn emergency_to_pb(e: &Emergency) -> pb::EmergencySwitch {
    pb::EmergencySwitch {
        policy_id: e.policy_id.clone(),
        mode: match e.mode {
            EmergencyMode::Normal => pb::EmergencyMode::Normal,
            EmergencyMode::FailOpen => pb::EmergencyMode::FailOpen,
            EmergencyMode::Restricted => pb::EmergencyMode::Restricted,
        } as i32,
        min_priority: e.min_priority,
        restricted_rate_milli_per_sec: e.restricted_rate_milli_per_sec,
    }
}

pub fn emergency_from_pb(e: &pb::EmergencySwitch) -> Result<Emergency, Status> {
    let mode = match pb::EmergencyMode::try_from(e.mode) {
        Ok(pb::EmergencyMode::Normal) => EmergencyMode::Normal,
        Ok(pb::EmergencyMode::FailOpen) => EmergencyMode::FailOpen,
        Ok(pb::EmergencyMode::Restricted) => EmergencyMode::Restricted,
        _ => {
            return Err(Status::invalid_argument(
                "emergency.mode: must be NORMAL, FAIL_OPEN or RESTRICTED",
            ))
        }
    };
    if mode == EmergencyMode::Restricted && e.restricted_rate_milli_per_sec == 0 {
        return Err(Status::invalid_argument(
            "emergency.restricted_rate_milli_per_sec: required for RESTRICTED",
        ));
    }
    Ok(Emergency {
        policy_id: e.policy_id.clone(),
        mode,
        min_priority: e.min_priority,
        restricted_rate_milli_per_sec: e.restricted_rate_milli_per_sec,
    })
}

use leasehold_proto::LAST_REQUEST_ID_METADATA_KEY;

/// Longest status message sent back, in bytes. A message echoing a hostile value (a 20 KB
/// policy id) would otherwise not fit the response's header block.
pub const STATUS_MESSAGE_LEN_MAX: usize = 1024;

/// `status` with its message cut to [`STATUS_MESSAGE_LEN_MAX`] bytes (on a character
/// boundary), metadata kept.
pub fn bounded_status(status: Status) -> Status {
    let message = status.message();
    if message.len() <= STATUS_MESSAGE_LEN_MAX {
        return status;
    }
    let mut cut = STATUS_MESSAGE_LEN_MAX;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let short = format!("{}… ({} bytes cut)", &message[..cut], message.len() - cut);
    Status::with_metadata(status.code(), short, status.metadata().clone())
}

pub fn ledger_status(e: &LedgerError) -> Status {
    let code = match e {
        LedgerError::UnknownPolicy(_)
        | LedgerError::UnknownLease(_)
        | LedgerError::UnknownKey(_) => Code::NotFound,
        LedgerError::NotHolder { .. } => Code::PermissionDenied,
        LedgerError::LeaseClosed { .. }
        | LedgerError::StaleRequest { .. }
        | LedgerError::StalePolicyVersion { .. }
        | LedgerError::ExactPolicy(_)
        | LedgerError::NotExact(_)
        | LedgerError::NotOwner { .. } => Code::FailedPrecondition,
        LedgerError::LimitReached { .. } => Code::ResourceExhausted,
        _ => Code::InvalidArgument,
    };
    let mut status = Status::new(code, e.to_string());
    if let LedgerError::StaleRequest { last, .. } = e {
        // A restarted holder whose request ids start lower than its previous run's (its wall
        // clock stepped back) continues above the last one seen, at once.
        if let Ok(v) = last.to_string().parse() {
            status
                .metadata_mut()
                .insert(LAST_REQUEST_ID_METADATA_KEY, v);
        }
    }
    status
}

pub fn admin_status(e: &AdminError) -> Status {
    match e {
        AdminError::Invalid(m) => Status::invalid_argument(m.clone()),
        AdminError::NotFound(m) => Status::not_found(m.clone()),
        AdminError::Refused(m) => Status::failed_precondition(m.clone()),
    }
}

/// A replication failure as a status; not-leader carries the leader's address so clients
/// can switch (`leasehold-leader` metadata).
pub fn replica_status(e: ReplicaError) -> Status {
    match e {
        ReplicaError::NotLeader { leader_addr, .. } => {
            let mut status = Status::unavailable(format!(
                "not the leader; leader is {}",
                leader_addr.as_deref().unwrap_or("unknown")
            ));
            if let Some(addr) = leader_addr.and_then(|a| a.parse().ok()) {
                status.metadata_mut().insert(LEADER_METADATA_KEY, addr);
            }
            status
        }
        ReplicaError::Unavailable(m) => Status::unavailable(m),
        ReplicaError::Unknown(m) => Status::unavailable(format!(
            "outcome unknown, retry with the same request id: {m}"
        )),
    }
}
