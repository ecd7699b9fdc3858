//! An in-process root ledger as a grantor: `--standalone` agents and tests lease from it
//! without a cluster.

use crate::grantor::{BoxFuture, Grantor, GrantorError};
use crate::wire::{
    acquire_from_pb, decide_items, decided_to_pb, deny_to_pb, lease_to_pb, release_from_pb,
    report_from_pb,
};
use leasehold_common::lease::LeaseSigner;
use leasehold_common::ledger::PolicyParams;
use leasehold_common::ledger::{Command, Decide, Ledger, LedgerError, Outcome, Refund};
use leasehold_common::policy::Policy;
use leasehold_common::time::Clock;
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::{Arc, Mutex};

/// An in-process root ledger: the grantor of `--standalone` agents and of tests.
pub struct LocalGrantor {
    ledger: Mutex<Ledger>,
    signer: LeaseSigner,
    clock: Arc<dyn Clock>,
}

impl LocalGrantor {
    pub fn new(ledger: Ledger, signer: LeaseSigner, clock: Arc<dyn Clock>) -> Self {
        LocalGrantor {
            ledger: Mutex::new(ledger),
            signer,
            clock,
        }
    }

    /// Installs the leasable policies (token bucket, GCRA); others are enforced by the
    /// engine itself and need no grantor.
    pub fn install(&self, policies: &[Policy]) -> Result<usize, String> {
        let mut n = 0;
        for p in policies {
            if let Ok(params) = PolicyParams::from_policy(p, 1) {
                self.apply(Command::PutPolicy(params))
                    .map_err(|e| format!("policy {}: {e}", p.id))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Writes off expired leases; call periodically.
    pub fn tick(&self) {
        let _ = self.apply(Command::Tick);
    }

    /// Runs `f` on the ledger (for inspection).
    pub fn with_ledger<R>(&self, f: impl FnOnce(&Ledger) -> R) -> R {
        f(&self.ledger.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn apply(&self, cmd: Command) -> Result<Outcome, leasehold_common::ledger::LedgerError> {
        let now = self.clock.now();
        self.ledger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(now, cmd)
    }

    fn signed(&self, mut lease: leasehold_common::lease::Lease) -> pb::Lease {
        self.signer.sign(&mut lease);
        lease_to_pb(&lease)
    }
}

fn refused(e: impl Into<Refusal>) -> GrantorError {
    match e.into() {
        Refusal::Ledger(LedgerError::StaleRequest { last, .. }) => {
            GrantorError::StaleRequest { last }
        }
        Refusal::Ledger(e) => refused(Refusal::Other(e.to_string())),
        Refusal::Other(message) => GrantorError::Refused {
            code: tonic::Code::FailedPrecondition,
            message,
        },
    }
}

/// Why the in-process ledger refused a request.
enum Refusal {
    Ledger(LedgerError),
    Other(String),
}

impl From<LedgerError> for Refusal {
    fn from(e: LedgerError) -> Self {
        Refusal::Ledger(e)
    }
}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal::Other(message)
    }
}

impl Grantor for LocalGrantor {
    fn acquire(
        &self,
        r: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        let cmd = Command::Acquire(acquire_from_pb(&r));
        let out = match self.apply(cmd) {
            Ok(Outcome::Granted(g)) => Ok(pb::AcquireResponse {
                lease: Some(self.signed(g.lease)),
                ..Default::default()
            }),
            Ok(Outcome::Denied {
                reason,
                retry_after_ns,
            }) => Ok(pb::AcquireResponse {
                retry_after_ms: retry_after_ns.div_ceil(1_000_000),
                deny_reason: deny_to_pb(reason) as i32,
                ..Default::default()
            }),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn report(
        &self,
        r: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        let cmd = Command::Report(report_from_pb(&r));
        let out = match self.apply(cmd) {
            Ok(Outcome::Granted(g)) => {
                let g = *g;
                Ok(pb::ReportResponse {
                    lease: Some(self.signed(g.lease)),
                    replacement: g.replacement.map(|l| self.signed(*l)),
                    retry_after_ms: g.retry_after_ns.div_ceil(1_000_000),
                    ..Default::default()
                })
            }
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn release(
        &self,
        r: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        let cmd = Command::Release(release_from_pb(&r));
        let out = match self.apply(cmd) {
            Ok(Outcome::Released {
                reclaimed,
                stranded,
            }) => Ok(pb::ReleaseResponse {
                reclaimed,
                stranded,
            }),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn decide(
        &self,
        r: pb::DecideRequest,
    ) -> BoxFuture<'_, Result<pb::DecideResponse, GrantorError>> {
        let cmd = Command::Decide(Decide {
            items: decide_items(&r.items),
        });
        let out = match self.apply(cmd) {
            Ok(Outcome::Decided(d)) => Ok(decided_to_pb(&d)),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }

    fn refund(
        &self,
        r: pb::RefundRequest,
    ) -> BoxFuture<'_, Result<pb::RefundResponse, GrantorError>> {
        let cmd = Command::Refund(Refund {
            items: decide_items(&r.items),
            decided_at: Nanos(r.decided_at_ns),
        });
        let out = match self.apply(cmd) {
            Ok(Outcome::Refunded { units }) => Ok(pb::RefundResponse { units }),
            Ok(other) => Err(refused(format!("unexpected outcome {other:?}"))),
            Err(e) => Err(refused(e)),
        };
        Box::pin(std::future::ready(out))
    }
}
