//! A simulated agent: a holder of one lease from its region's ledger, which admits locally
//! and follows its policy's failure behaviour while the region cannot be reached.

use super::clock::SimClock;
use super::witness::{SpendAt, Witness};
use super::{Defect, HierarchyConfig, StepTotals, KEY, POLICY_ID};
use leasehold_common::algo::TokenBucket;
use leasehold_common::ledger::{Acquire, Command, Grant, Ledger, LedgerError, Outcome, Report};
use leasehold_common::policy::FailureMode;
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use serde::Serialize;

/// What an agent had in hand when it crashed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CrashKind {
    /// Credit granted and not yet spent.
    UnusedCredit,
    /// All its credit spent in a burst just before the crash, none of it reported.
    JustSpent,
}

/// The agent's own record of its lease.
struct Held {
    lease_id: u64,
    credit: u64,
    spent: u64,
    returned: u64,
    /// On the agent's own clock, measured from when it sent the request.
    deadline_ns: u64,
    generation: u64,
}

/// The agent's view of its region for one step.
pub struct Link<'a> {
    pub ledger: &'a mut Ledger,
    /// The root's ledger, read only by the witness.
    pub root: &'a Ledger,
    /// The region's time: the grantor stamps commands with it.
    pub region_now: Nanos,
    pub true_ns: u64,
    pub witness: &'a mut Witness,
}

impl Link<'_> {
    /// Tells the witness that `units` were admitted under `lease_id`.
    fn record_spend(&mut self, region: usize, lease_id: u64, units: u64) {
        let at = SpendAt {
            region,
            ledger: self.ledger,
            root: self.root,
            now: self.true_ns,
        };
        self.witness.spent(at, lease_id, units);
    }
}

pub struct Agent {
    id: usize,
    region: usize,
    incarnation: u32,
    request: u64,
    lease: Option<Held>,
    next_report_ns: u64,
    /// No early (running-low) refresh before then.
    early_refresh_after_ns: u64,
    /// A refused acquire is not repeated before the grantor's retry hint.
    acquire_after_ns: u64,
    offered_since_report: u64,
    last_report_ns: u64,
    demand_per_sec: u64,
    clock: SimClock,
    partitioned: bool,
    /// Set when a request could not reach the region, cleared by the next that does.
    unreachable: bool,
    emergency: Option<TokenBucket>,
    defect: Option<Defect>,
    /// Requests that reached the region during the current step.
    sent: u64,
    /// Hundredths of a unit of critical traffic carried to the next step, so a small
    /// share of a few units per step is not rounded away.
    critical_carry: u64,
}

impl Agent {
    pub fn new(id: usize, region: usize, defect: Option<Defect>, clock: SimClock) -> Self {
        Agent {
            id,
            region,
            incarnation: 0,
            request: 0,
            lease: None,
            next_report_ns: 0,
            early_refresh_after_ns: 0,
            acquire_after_ns: 0,
            offered_since_report: 0,
            last_report_ns: 0,
            demand_per_sec: 0,
            clock,
            partitioned: false,
            unreachable: false,
            emergency: None,
            defect: defect.filter(|d| d.agent() == id),
            sent: 0,
            critical_carry: 0,
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

    pub fn clock_mut(&mut self) -> &mut SimClock {
        &mut self.clock
    }

    pub fn clock(&self) -> &SimClock {
        &self.clock
    }

    pub fn set_partitioned(&mut self, cut: bool) {
        self.partitioned = cut;
    }

    /// Loses the lease and any unreported spend, and comes back as a new holder. Returns
    /// the units admitted in the burst before a [`CrashKind::JustSpent`] crash.
    pub fn crash(&mut self, kind: CrashKind, mut link: Link<'_>) -> u64 {
        let mut burst = 0;
        if let Some(l) = &mut self.lease {
            if kind == CrashKind::JustSpent {
                burst = l.credit.saturating_sub(l.spent);
                l.spent += burst;
                link.record_spend(self.region, l.lease_id, burst);
            }
            link.witness.crashed(self.region, l.lease_id);
        }
        self.lease = None;
        self.incarnation += 1;
        self.request = 0;
        self.unreachable = false;
        self.emergency = None;
        burst
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

    /// Sends a request; `None` when the region cannot be reached.
    fn call(&mut self, link: &mut Link<'_>, cmd: Command) -> Option<Result<Outcome, LedgerError>> {
        if self.partitioned {
            self.unreachable = true;
            return None;
        }
        self.unreachable = false;
        self.sent += 1;
        let out = link.ledger.apply(link.region_now, cmd);
        if let Ok(Outcome::Granted(g)) = &out {
            link.witness.granted(self.region, &g.lease, link.true_ns);
        }
        Some(out)
    }

    /// One step: admits what the lease and failure behaviour allow out of `offered`, and
    /// talks to the region. Returns the totals and the requests that reached the region.
    pub fn step(
        &mut self,
        mut link: Link<'_>,
        offered: u64,
        cfg: &HierarchyConfig,
    ) -> (StepTotals, u64) {
        self.sent = 0;
        let now = self.clock.read(link.true_ns);
        self.offered_since_report += offered;
        let ignores_expiry = matches!(self.defect, Some(Defect::IgnoreExpiry { .. }));
        if !ignores_expiry && self.lease.as_ref().is_some_and(|l| now.0 >= l.deadline_ns) {
            self.lease = None;
        }
        if self.lease.is_none() && offered > 0 && now.0 >= self.acquire_after_ns {
            self.acquire(&mut link, now, offered, cfg);
        }
        let t = self.admit(&mut link, now, offered, cfg);
        // Refresh before empty: report early once less than half a horizon's demand is left.
        let low = now.0 >= self.early_refresh_after_ns
            && self
                .lease
                .as_ref()
                .is_some_and(|l| 2 * l.credit.saturating_sub(l.spent) < self.want(cfg));
        if now.0 >= self.next_report_ns || low {
            self.report(&mut link, now, cfg);
        }
        (t, self.sent)
    }

    /// Admits what the held lease and the failure behaviour allow out of `offered`.
    fn admit(
        &mut self,
        link: &mut Link<'_>,
        now: Nanos,
        offered: u64,
        cfg: &HierarchyConfig,
    ) -> StepTotals {
        let mut t = StepTotals {
            offered,
            ..StepTotals::default()
        };
        // Fail-closed and restricted stop spending held credit once the region is found
        // unreachable; the others spend what they hold first.
        let spend_held = !self.unreachable
            || matches!(
                cfg.failure,
                FailureMode::CachedLease | FailureMode::FailOpen
            );
        let overspends = matches!(self.defect, Some(Defect::Overspend { .. }));
        if let (true, Some(l)) = (spend_held, &mut self.lease) {
            t.admitted = offered.min(l.credit.saturating_sub(l.spent));
            // The defect: only half of what is admitted is charged to the lease.
            l.spent += if overspends {
                t.admitted / 2
            } else {
                t.admitted
            };
            let lease_id = l.lease_id;
            link.record_spend(self.region, lease_id, t.admitted);
        }
        let rest = offered - t.admitted;
        if self.unreachable {
            match cfg.failure {
                FailureMode::FailOpen => t.fail_open = rest,
                FailureMode::Restricted => {
                    let hundredths = rest * cfg.critical_pct + self.critical_carry;
                    self.critical_carry = hundredths % 100;
                    t.restricted = self.emergency_take(now, hundredths / 100, cfg);
                }
                FailureMode::FailClosed | FailureMode::CachedLease => {}
            }
        }
        t.rejected = rest - t.fail_open - t.restricted;
        t
    }

    /// Critical traffic admitted at the local emergency rate, uncharged and counted apart.
    fn emergency_take(&mut self, now: Nanos, want: u64, cfg: &HierarchyConfig) -> u64 {
        let rate = Rate::per_second(cfg.emergency_rate_per_sec).expect("validated positive");
        let bucket = self
            .emergency
            .get_or_insert_with(|| TokenBucket::full(rate, rate.units(), now));
        bucket.refill(now);
        let take = want.min(bucket.tokens());
        bucket.take_exact(take);
        take
    }

    fn acquire(&mut self, link: &mut Link<'_>, now: Nanos, offered: u64, cfg: &HierarchyConfig) {
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
        let g = match self.call(link, cmd) {
            Some(Ok(Outcome::Granted(g))) => g,
            Some(Ok(Outcome::Denied { retry_after_ns, .. })) => {
                self.acquire_after_ns = now.0 + retry_hint_ns(retry_after_ns, cfg);
                return;
            }
            _ => return,
        };
        {
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

    fn report(&mut self, link: &mut Link<'_>, now: Nanos, cfg: &HierarchyConfig) {
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
        let remaining = l.credit.saturating_sub(l.spent);
        let give_back = remaining.saturating_sub(2 * want_total);
        l.credit -= give_back;
        l.returned += give_back;
        let cmd = Command::Report(Report {
            holder_id,
            lease_id: l.lease_id,
            used: l.spent,
            return_credit: l.returned,
            want_credit: want_total.saturating_sub(remaining - give_back),
            demand_milli_per_sec: self.demand_per_sec * 1_000,
            request_id,
            priority: 0,
        });
        match self.call(link, cmd) {
            // Unreachable: keep the lease for as long as the failure behaviour allows.
            None => {}
            Some(Ok(Outcome::Granted(g))) => self.on_renewal(now, &g, cfg),
            // Closed, expired or otherwise refused: stop using it; acquire afresh.
            Some(_) => self.lease = None,
        }
    }

    fn on_renewal(&mut self, now: Nanos, g: &Grant, cfg: &HierarchyConfig) {
        // Early refreshes are spaced out: while the grantor is contended a holder stays
        // "low" after every renewal, and asking every step would only load the grantor.
        self.early_refresh_after_ns = now.0 + cfg.report_every_ms * 1_000_000 / 4;
        if let Some(l) = &mut self.lease {
            l.credit = g.lease.credit;
            if g.lease.generation > l.generation {
                l.generation = g.lease.generation;
                l.deadline_ns = now.0 + g.lease.ttl_ms * 1_000_000;
            }
        }
    }
}

/// How long a refused holder waits before asking again: the grantor's hint, but at least a
/// step and at most a report interval (the hint can be far off when others hand back).
pub(super) fn retry_hint_ns(retry_after_ns: u64, cfg: &HierarchyConfig) -> u64 {
    retry_after_ns.clamp(cfg.step_ns(), cfg.report_every_ms * 1_000_000)
}
