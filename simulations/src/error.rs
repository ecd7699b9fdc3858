//! Why a simulation could not be set up or run.

use leasehold_common::ledger::LedgerError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SimError {
    #[error("configuration field '{field}' = {value}: {reason}")]
    InvalidConfig {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("fault names agent {agent}, but there are only {agents} agents")]
    NoSuchAgent { agent: usize, agents: usize },
    #[error("fault names region {region}, but there are only {regions} regions")]
    NoSuchRegion { region: usize, regions: usize },
    #[error("unknown scenario '{0}' (try `leasehold-sim list`)")]
    UnknownScenario(String),
    #[error("ledger refused setup command: {0}")]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Net(#[from] crate::net::NetError),
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl SimError {
    /// A configuration field with a bad value.
    pub fn config(field: &'static str, value: impl ToString, reason: &'static str) -> SimError {
        SimError::InvalidConfig {
            field,
            value: value.to_string(),
            reason,
        }
    }
}
