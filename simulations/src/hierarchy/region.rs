//! A simulated regional allocator: a delegated ledger plus its own lease from the root.

use super::{HierarchyConfig, KEY, POLICY_ID};
use leasehold_common::ledger::{
    Acquire, Command, Ledger, LedgerConfig, Outcome, PolicyParams, Report, UpstreamLease,
};
use leasehold_common::time::Nanos;

struct Upstream {
    lease_id: u64,
    returned: u64,
    deadline_ns: u64,
    generation: u64,
}

pub struct Region {
    id: usize,
    ledger: Ledger,
    upstream: Option<Upstream>,
    request: u64,
    next_report_ns: u64,
}

impl Region {
    pub fn new(id: usize, params: &PolicyParams) -> Result<Self, String> {
        let mut ledger = Ledger::new(LedgerConfig::delegated(format!("region-{id}")));
        ledger
            .apply(Nanos(0), Command::PutPolicy(params.clone()))
            .map_err(|e| e.to_string())?;
        Ok(Region {
            id,
            ledger,
            upstream: None,
            request: 0,
            next_report_ns: 0,
        })
    }

    pub fn id(&self) -> usize {
        self.id
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    fn holder_id(&self) -> String {
        format!("region-{}", self.id)
    }

    fn next_request(&mut self) -> u64 {
        self.request += 1;
        self.request
    }

    pub fn step(&mut self, root: &mut Ledger, now: Nanos, demand: u64, cfg: &HierarchyConfig) {
        self.ledger.apply(now, Command::Tick).expect("tick");
        if self
            .upstream
            .as_ref()
            .is_some_and(|u| now.0 >= u.deadline_ns)
        {
            self.upstream = None;
            let closed = Command::UpstreamClosed {
                key: KEY.into(),
                released: false,
            };
            // The key may not exist yet if nothing was ever sub-leased.
            let _ = self.ledger.apply(now, closed);
        }
        let want = (demand * cfg.horizon_ms() / 1_000).max(1);
        if self.upstream.is_none() {
            self.acquire(root, now, want, demand);
        } else if now.0 >= self.next_report_ns || self.running_low(want) {
            self.report(root, now, want, demand, cfg);
        }
    }

    /// Refresh before empty: less than half a horizon's demand left to sub-lease.
    fn running_low(&self, want: u64) -> bool {
        self.ledger
            .upstream_position(KEY)
            .is_some_and(|p| 2 * p.idle < want)
    }

    fn acquire(&mut self, root: &mut Ledger, now: Nanos, want: u64, demand: u64) {
        let cmd = Command::Acquire(Acquire {
            holder_id: self.holder_id(),
            policy_id: POLICY_ID.into(),
            key: KEY.into(),
            want_credit: want,
            demand_milli_per_sec: demand * 1_000,
            request_id: self.next_request(),
            priority: 0,
        });
        if let Ok(Outcome::Granted(g)) = root.apply(now, cmd) {
            let deadline_ns = now.0 + g.lease.ttl_ms * 1_000_000;
            self.publish(
                now,
                g.lease.lease_id,
                g.lease.credit,
                deadline_ns,
                g.lease.generation,
            );
            self.upstream = Some(Upstream {
                lease_id: g.lease.lease_id,
                returned: 0,
                deadline_ns,
                generation: g.lease.generation,
            });
        }
    }

    fn report(
        &mut self,
        root: &mut Ledger,
        now: Nanos,
        want: u64,
        demand: u64,
        cfg: &HierarchyConfig,
    ) {
        self.next_report_ns = now.0 + cfg.report_every_ms * 1_000_000;
        let Some(pos) = self.ledger.upstream_position(KEY) else {
            return;
        };
        // Idle credit beyond two horizons of demand goes back to the root.
        let give_back = pos.idle.saturating_sub(2 * want);
        if give_back > 0 {
            let ret = Command::UpstreamReturn {
                key: KEY.into(),
                units: give_back,
            };
            self.ledger.apply(now, ret).expect("idle checked");
        }
        let request_id = self.next_request();
        let holder_id = self.holder_id();
        let up = self.upstream.as_mut().expect("checked by caller");
        up.returned += give_back;
        let cmd = Command::Report(Report {
            holder_id,
            lease_id: up.lease_id,
            used: pos.used,
            return_credit: up.returned,
            want_credit: want.saturating_sub(pos.idle - give_back),
            demand_milli_per_sec: demand * 1_000,
            request_id,
            priority: 0,
        });
        let Ok(Outcome::Granted(g)) = root.apply(now, cmd) else {
            return;
        };
        if g.lease.generation > up.generation {
            up.generation = g.lease.generation;
            up.deadline_ns = now.0 + g.lease.ttl_ms * 1_000_000;
        }
        let (lease_id, deadline_ns, generation) = (up.lease_id, up.deadline_ns, up.generation);
        self.publish(now, lease_id, g.lease.credit, deadline_ns, generation);
    }

    fn publish(
        &mut self,
        now: Nanos,
        lease_id: u64,
        credit: u64,
        deadline_ns: u64,
        generation: u64,
    ) {
        let cmd = Command::UpstreamGranted(UpstreamLease {
            policy_id: POLICY_ID.into(),
            key: KEY.into(),
            upstream_lease_id: lease_id,
            credit,
            deadline: Nanos(deadline_ns),
            generation,
        });
        self.ledger.apply(now, cmd).expect("upstream lease is ours");
    }
}
