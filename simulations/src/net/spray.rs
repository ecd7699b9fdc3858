//! Key spraying on the production agent: an attacker behind one agent presents a tenant
//! never seen before on every request. The engine's key table and the grantor's ledger must
//! stay within their caps, and the tenant every agent serves keeps its budget.

use super::accounting::Accounts;
use super::clock::SteppedClock;
use super::{NetConfig, Spray};
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, Outcome};
use std::fmt::Write;

/// What the sprayed requests did, over the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SprayLog {
    pub offered: u64,
    /// Admitted and charged, each to its own sprayed key or to the policy's overflow key.
    pub admitted: u64,
    /// The most keys the spraying agent's engine held at the end of a round, and its cap.
    pub engine_keys_peak: usize,
    pub engine_keys_max: usize,
    /// Requests the engine sent to the overflow key because its key table was full.
    pub table_full: u64,
}

/// The spraying agent's state between rounds: the next fresh tenant's number.
#[derive(Debug, Default)]
pub struct Sprayer {
    next: u64,
    tenant: String,
}

impl Sprayer {
    /// Offers this round's sprayed requests if `index` is the spraying agent and the spray
    /// is on at `at_ms`, counting them into `log` and each decision into `accounts`.
    #[allow(clippy::too_many_arguments)]
    pub fn round(
        &mut self,
        index: usize,
        cfg: &NetConfig,
        engine: &Engine,
        clock: &SteppedClock,
        at_ms: u64,
        accounts: &Accounts,
        log: &mut SprayLog,
    ) {
        let Some(Spray {
            agent,
            keys_per_round,
            from_ms,
            until_ms,
        }) = cfg.spray
        else {
            return;
        };
        if agent != index || !(from_ms..until_ms).contains(&at_ms) {
            return;
        }
        for _ in 0..keys_per_round {
            self.tenant.clear();
            let _ = write!(self.tenant, "sprayed-{index}-{}", self.next);
            self.next += 1;
            let entries = [("tenant", self.tenant.as_str())];
            let dims = [Dimension::policy(&cfg.policy_id, &entries)];
            let decision = engine.admit(
                &AdmitRequest::new(&dims),
                leasehold_common::time::Clock::now(clock),
            );
            let outcome = decision
                .results
                .first()
                .map_or(Outcome::Skipped, |r| r.outcome);
            accounts.count(index, outcome);
            log.offered += 1;
            log.admitted += u64::from(outcome == Outcome::Admitted);
        }
        let stats = engine.stats();
        log.engine_keys_peak = log.engine_keys_peak.max(stats.keys);
        log.engine_keys_max = stats.keys_max;
        log.table_full = log.table_full.max(stats.table_full);
    }
}
