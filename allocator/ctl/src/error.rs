//! `leasectl` failures and the exit codes scripts can rely on.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CtlError {
    #[error("{0}")]
    Config(String),
    #[error("cannot connect to {0}")]
    Connect(String),
    #[error("{0}")]
    Input(String),
    #[error("{}", describe(.0))]
    Rpc(tonic::Status),
    #[error("{0}")]
    Output(String),
    /// One of several documents failed; those before it stay applied.
    #[error("{file}: {source}; {}", applied_before(.applied))]
    Partial {
        file: String,
        applied: Vec<String>,
        source: Box<CtlError>,
    },
}

fn applied_before(applied: &[String]) -> String {
    if applied.is_empty() {
        "nothing was applied".to_owned()
    } else {
        format!("applied before it: {}", applied.join(", "))
    }
}

/// Whether the call failed below gRPC: the connection, TLS or HTTP/2 rather than an answer.
fn is_transport_failure(status: &tonic::Status) -> bool {
    matches!(status.code(), tonic::Code::Unknown | tonic::Code::Internal)
        && std::error::Error::source(status).is_some()
}

fn describe(status: &tonic::Status) -> String {
    if is_transport_failure(status) {
        return format!(
            "unreachable: {} (check the server address, --ca, --cert, --key and --server-name)",
            status.message()
        );
    }
    let hint = match status.code() {
        tonic::Code::PermissionDenied => " (admin RPCs need an admin certificate)",
        tonic::Code::Unauthenticated => " (pass --ca, --cert and --key of an admin identity)",
        tonic::Code::Unavailable => " (is the cluster up and does it have a leader?)",
        _ => "",
    };
    format!("{}: {}{hint}", code_name(status.code()), status.message())
}

fn code_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::InvalidArgument => "invalid",
        tonic::Code::NotFound => "not found",
        tonic::Code::AlreadyExists => "already exists",
        tonic::Code::FailedPrecondition => "refused",
        tonic::Code::PermissionDenied => "permission denied",
        tonic::Code::Unauthenticated => "unauthenticated",
        tonic::Code::Unavailable => "unavailable",
        tonic::Code::DeadlineExceeded => "timed out",
        _ => "error",
    }
}

impl CtlError {
    /// 0 success, 1 other failure, 2 usage (clap), 3 not found, 4 permission, 5
    /// unreachable, 6 invalid input, 7 refused (precondition or conflict).
    pub fn exit_code(&self) -> i32 {
        match self {
            CtlError::Config(_) | CtlError::Input(_) => 6,
            CtlError::Connect(_) => 5,
            CtlError::Output(_) => 1,
            CtlError::Partial { source, .. } => source.exit_code(),
            CtlError::Rpc(s) if is_transport_failure(s) => 5,
            CtlError::Rpc(s) => match s.code() {
                tonic::Code::NotFound => 3,
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => 4,
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => 5,
                tonic::Code::InvalidArgument | tonic::Code::OutOfRange => 6,
                tonic::Code::FailedPrecondition
                | tonic::Code::AlreadyExists
                | tonic::Code::Aborted => 7,
                _ => 1,
            },
        }
    }
}
