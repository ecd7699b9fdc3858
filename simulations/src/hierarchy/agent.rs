//! A simulated agent: an honest holder of one lease from its region's ledger.

use super::{HierarchyConfig, StepTotals, KEY, POLICY_ID};
use leasehold_common::ledger::{Acquire, Command, Ledger, Outcome, Report};
use leasehold_common::time::Nanos;

/// The agent's own record of its lease.
struct Held {
    lease_id: u64,
    credit: u64,
    spent: u64,
    returned: u64,
    deadline_ns: u64,
    generation: u64,
}

pub struct Agent {
    id: usize,
    region: usize,
    incarnation: u32,
    request: u64,
    lease: Option<Held>,
    next_report_ns: u64,
    offered_since_report: u64,
    last_report_ns: u64,
    demand_per_sec: u64,
}

impl Agent {
    pub fn new(id: usize, region: usize) -> Self {
        Agent {
            id,
            region,
            incarnation: 0,
            request: 0,
            lease: None,
            next_report_ns: 0,
            offered_since_report: 0,
            last_report_ns: 0,
            demand_per_sec: 0,
        }
    }

    pub fn id(&self) -> usize {
        self.id
    }

    pub fn region(&self) -> usize {
        self.region
    }

    pub fn demand_per_sec(&self) -> u64 {
        self.demand_per_sec
    }

    /// Loses the lease and any unreported spend, and comes back as a new holder.
    pub fn crash(&mut self) {
        self.lease = None;
        self.incarnation += 1;
        self.request = 0;
    }

    fn holder_id(&self) -> String {
        format!("agent-{}-{}", self.id, self.incarnation)
    }

    fn next_request(&mut self) -> u64 {
        self.request += 1;
        self.request
    }

    fn want(&self, cfg: &HierarchyConfig) -> u64 {
        (self.demand_per_sec * cfg.horizon_ms() / 1_000).max(1)
    }

    pub fn step(
        &mut self,
        ledger: &mut Ledger,
        now: Nanos,
        offered: u64,
        cfg: &HierarchyConfig,
    ) -> StepTotals {
        self.offered_since_report += offered;
        if self.lease.as_ref().is_some_and(|l| now.0 >= l.deadline_ns) {
            self.lease = None;
        }
        if self.lease.is_none() && offered > 0 {
            self.acquire(ledger, now, offered, cfg);
        }
        let mut admitted = 0;
        if let Some(l) = &mut self.lease {
            admitted = offered.min(l.credit - l.spent);
            l.spent += admitted;
        }
        // Refresh before empty: report early once less than half a horizon's demand is left.
        let low = self
            .lease
            .as_ref()
            .is_some_and(|l| 2 * (l.credit - l.spent) < self.want(cfg));
        if now.0 >= self.next_report_ns || low {
            self.report(ledger, now, cfg);
        }
        StepTotals {
            offered,
            admitted,
            rejected: offered - admitted,
        }
    }

    fn acquire(&mut self, ledger: &mut Ledger, now: Nanos, offered: u64, cfg: &HierarchyConfig) {
        let step_per_sec = 1_000 / cfg.step_ms.max(1);
        self.demand_per_sec = self.demand_per_sec.max(offered * step_per_sec);
        let cmd = Command::Acquire(Acquire {
            holder_id: self.holder_id(),
            policy_id: POLICY_ID.into(),
            key: KEY.into(),
            want_credit: self.want(cfg),
            demand_milli_per_sec: self.demand_per_sec * 1_000,
            request_id: self.next_request(),
            priority: 0,
        });
        if let Ok(Outcome::Granted(g)) = ledger.apply(now, cmd) {
            self.lease = Some(Held {
                lease_id: g.lease.lease_id,
                credit: g.lease.credit,
                spent: 0,
                returned: 0,
                deadline_ns: now.0 + g.lease.ttl_ms * 1_000_000,
                generation: g.lease.generation,
            });
        }
    }

    fn report(&mut self, ledger: &mut Ledger, now: Nanos, cfg: &HierarchyConfig) {
        // Demand is measured over at least one report interval, so early refreshes do not
        // read a short burst as the steady rate.
        let elapsed_ns = now.0.saturating_sub(self.last_report_ns);
        if elapsed_ns >= cfg.report_every_ms * 1_000_000 {
            self.demand_per_sec = self.offered_since_report * 1_000_000_000 / elapsed_ns;
            self.offered_since_report = 0;
            self.last_report_ns = now.0;
        }
        self.next_report_ns = now.0 + cfg.report_every_ms * 1_000_000;
        let want_total = self.want(cfg);
        let request_id = self.next_request();
        let holder_id = self.holder_id();
        let Some(l) = &mut self.lease else {
            return;
        };
        // Hand back what is well beyond two horizons of demand: idle credit should flow.
        let remaining = l.credit - l.spent;
        let give_back = remaining.saturating_sub(2 * want_total);
        l.credit -= give_back;
        l.returned += give_back;
        let cmd = Command::Report(Report {
            holder_id,
            lease_id: l.lease_id,
            used: l.spent,
            return_credit: l.returned,
            want_credit: want_total.saturating_sub(l.credit - l.spent),
            demand_milli_per_sec: self.demand_per_sec * 1_000,
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
            // Closed, expired or otherwise refused: stop using it; acquire afresh.
            _ => self.lease = None,
        }
    }
}
