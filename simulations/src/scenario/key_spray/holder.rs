//! A minimal lease holder for one key, talking straight to a root ledger.

use leasehold_common::ledger::{Acquire, Command, Ledger, Outcome, Report};
use leasehold_common::time::Nanos;

struct Held {
    lease_id: u64,
    credit: u64,
    spent: u64,
    deadline_ns: u64,
    generation: u64,
}

/// Admits against one lease, renewing before it runs dry.
pub struct Holder {
    policy_id: String,
    key: String,
    holder_id: String,
    request: u64,
    lease: Option<Held>,
    /// Admitted units per step.
    series: Vec<u64>,
}

impl Holder {
    pub fn new(policy_id: &str, key: &str, holder_id: &str) -> Self {
        Holder {
            policy_id: policy_id.into(),
            key: key.into(),
            holder_id: holder_id.into(),
            request: 0,
            lease: None,
            series: Vec::new(),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn series(&self) -> &[u64] {
        &self.series
    }

    pub fn admitted(&self) -> u64 {
        self.series.iter().sum()
    }

    /// Admits what its lease allows of `offered`; asks for half a second of `rate_per_sec`.
    pub fn step(
        &mut self,
        ledger: &mut Ledger,
        now: Nanos,
        offered: u64,
        rate_per_sec: u64,
    ) -> u64 {
        if self.lease.as_ref().is_some_and(|l| now.0 >= l.deadline_ns) {
            self.lease = None;
        }
        let want = (rate_per_sec / 2).max(1);
        if self.lease.is_none() && offered > 0 {
            self.acquire(ledger, now, want);
        }
        let admitted = match &mut self.lease {
            Some(l) => {
                let a = offered.min(l.credit - l.spent);
                l.spent += a;
                a
            }
            None => 0,
        };
        if self
            .lease
            .as_ref()
            .is_some_and(|l| 2 * (l.credit - l.spent) < want)
        {
            self.renew(ledger, now, want);
        }
        self.series.push(admitted);
        admitted
    }

    fn next_request(&mut self) -> u64 {
        self.request += 1;
        self.request
    }

    fn acquire(&mut self, ledger: &mut Ledger, now: Nanos, want: u64) {
        let cmd = Command::Acquire(Acquire {
            holder_id: self.holder_id.clone(),
            policy_id: self.policy_id.clone(),
            key: self.key.clone(),
            want_credit: want,
            demand_milli_per_sec: want * 2_000,
            request_id: self.next_request(),
            priority: 0,
        });
        if let Ok(Outcome::Granted(g)) = ledger.apply(now, cmd) {
            self.lease = Some(Held {
                lease_id: g.lease.lease_id,
                credit: g.lease.credit,
                spent: 0,
                deadline_ns: now.0 + g.lease.ttl_ms * 1_000_000,
                generation: g.lease.generation,
            });
        }
    }

    fn renew(&mut self, ledger: &mut Ledger, now: Nanos, want: u64) {
        let request_id = self.next_request();
        let Some(l) = &mut self.lease else { return };
        let cmd = Command::Report(Report {
            holder_id: self.holder_id.clone(),
            lease_id: l.lease_id,
            used: l.spent,
            return_credit: 0,
            want_credit: want,
            demand_milli_per_sec: want * 2_000,
            request_id,
            priority: 0,
        });
        match ledger.apply(now, cmd) {
            Ok(Outcome::Granted(g)) => {
                l.credit = g.lease.credit;
                if g.lease.generation > l.generation {
                    l.generation = g.lease.generation;
                    l.deadline_ns = now.0 + g.lease.ttl_ms * 1_000_000;
                }
            }
            _ => self.lease = None,
        }
    }
}
