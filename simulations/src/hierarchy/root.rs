//! The root grantor as its regions reach it: the real root ledger behind a link that can
//! lose its leader in the middle of a grant.

use leasehold_common::ledger::{Command, Ledger, LedgerError, Outcome};
use leasehold_common::time::Nanos;
use serde::Serialize;
use thiserror::Error;

/// What the new leader finds when the old one is lost while applying a command.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum LeaderLoss {
    /// The command had not been committed: the new leader's state is from before it.
    GrantLost,
    /// The command was committed but its answer never left: the state includes it.
    GrantKept,
}

/// Why a command sent to the root got no answer from its ledger.
#[derive(Debug, Error)]
pub enum LinkError {
    #[error("the grantor's leader was lost before it answered")]
    LeaderLost,
    #[error(transparent)]
    Refused(#[from] LedgerError),
}

/// The root ledger and its leadership.
pub struct RootLink {
    ledger: Ledger,
    armed: Option<LeaderLoss>,
    epoch: u64,
    losses: u64,
    commands: u64,
}

impl RootLink {
    /// A link to `ledger`, with no leader loss armed.
    pub fn new(ledger: Ledger) -> Self {
        RootLink {
            ledger,
            armed: None,
            epoch: 0,
            losses: 0,
            commands: 0,
        }
    }

    /// The ledger as the current leader holds it.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// For commands that are not requests from holders (ticks, policy changes).
    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    /// The next holder request loses the leader while it is being applied.
    pub fn arm(&mut self, loss: LeaderLoss) {
        self.armed = Some(loss);
    }

    /// Leader losses so far.
    pub fn losses(&self) -> u64 {
        self.losses
    }

    /// Holder requests received so far (answered or not).
    pub fn commands(&self) -> u64 {
        self.commands
    }

    /// Sends a holder's request. When a leader loss is armed, the new leader restores the
    /// last applied state (with or without this command) and the holder gets no answer; it
    /// must retry with the same request id.
    pub fn call(&mut self, now: Nanos, command: Command) -> Result<Outcome, LinkError> {
        self.commands += 1;
        let Some(loss) = self.armed.take() else {
            return Ok(self.ledger.apply(now, command)?);
        };
        self.losses += 1;
        let before = self.ledger.clone();
        // Whether it was granted or refused, the answer is lost with the leader.
        let _ = self.ledger.apply(now, command);
        if loss == LeaderLoss::GrantLost {
            self.ledger = before;
        }
        self.epoch += 1;
        let epoch = Command::SetEpoch { epoch: self.epoch };
        self.ledger.apply(now, epoch).expect("epoch never fails");
        Err(LinkError::LeaderLost)
    }
}
