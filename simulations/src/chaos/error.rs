//! Why a chaos run could not be set up, driven or checked.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ChaosError {
    #[error("configuration field '{field}': {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("binary {path} not found: build it first (cargo build -p leasehold-allocator -p leasehold-agent)")]
    MissingBinary { path: String },
    #[error("development PKI: {0}")]
    Pki(String),
    #[error("{process}: {reason}")]
    Process { process: String, reason: String },
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: String, waited_ms: u64 },
}

impl ChaosError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ChaosError {
        let what = what.into();
        move |source| ChaosError::Io { what, source }
    }

    pub fn process(process: impl Into<String>, reason: impl ToString) -> ChaosError {
        ChaosError::Process {
            process: process.into(),
            reason: reason.to_string(),
        }
    }
}
