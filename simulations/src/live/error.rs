//! Why the live hierarchy could not be started, driven or stopped.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum LiveError {
    #[error("configuration field '{field}' = {value}: {reason}")]
    InvalidConfig {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("temporary directory: {0}")]
    TempDir(std::io::Error),
    #[error("development PKI: {0}")]
    Pki(String),
    #[error("allocator node {node}: {reason}")]
    Node { node: String, reason: String },
    #[error("agent {agent}: {reason}")]
    Agent { agent: String, reason: String },
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: String, waited_ms: u64 },
    #[error("metrics of {node} at {addr}: {reason}")]
    Scrape {
        node: String,
        addr: String,
        reason: String,
    },
}

impl LiveError {
    /// A configuration field with a bad value.
    pub fn config(field: &'static str, value: impl ToString, reason: &'static str) -> LiveError {
        LiveError::InvalidConfig {
            field,
            value: value.to_string(),
            reason,
        }
    }
}
