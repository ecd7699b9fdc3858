//! A simulated regional allocator: a delegated ledger plus its own lease from the root.

use super::clock::SimClock;
use super::root::RootLink;
use super::{HierarchyConfig, KEY, POLICY_ID};
use leasehold_common::ledger::{
    Acquire, Command, Grant, Ledger, LedgerConfig, Outcome, PolicyParams, Report, UpstreamLease,
};
use leasehold_common::time::Nanos;

struct Upstream {
    lease_id: u64,
    returned: u64,
    deadline_ns: u64,
    generation: u64,
}

/// The region's own time and the root's, for one step.
#[derive(Copy, Clone)]
struct At {
    now: Nanos,
    root_now: Nanos,
    report_every_ms: u64,
}

/// A request the root did not answer, resent with the same request id until it is.
struct Pending {
    command: Command,
    /// The region's time at the first send: a lease granted by it is measured from here.
    sent_at: Nanos,
}

pub struct Region {
    id: usize,
    ledger: Ledger,
    upstream: Option<Upstream>,
    pending: Option<Pending>,
    request: u64,
    next_report_ns: u64,
    /// No early (running-low) refresh before then.
    early_refresh_after_ns: u64,
    /// A refused acquire is not repeated before the root's retry hint.
    acquire_after_ns: u64,
    clock: SimClock,
    partitioned: bool,
    unanswered: u64,
}

impl Region {
    pub fn new(
        id: usize,
        params: &PolicyParams,
        cfg: &HierarchyConfig,
    ) -> Result<Self, crate::SimError> {
        let mut lc = LedgerConfig::delegated(format!("region-{id}"));
        lc.limits = cfg.limits();
        let mut ledger = Ledger::new(lc);
        ledger.apply(Nanos(0), Command::PutPolicy(params.clone()))?;
        Ok(Region {
            id,
            ledger,
            upstream: None,
            pending: None,
            request: 0,
            next_report_ns: 0,
            early_refresh_after_ns: 0,
            acquire_after_ns: 0,
            clock: cfg.clock(),
            partitioned: false,
            unanswered: 0,
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

    pub fn clock_mut(&mut self) -> &mut SimClock {
        &mut self.clock
    }

    pub fn clock(&self) -> &SimClock {
        &self.clock
    }

    /// The region's own time at true time `true_ns`.
    pub fn now(&mut self, true_ns: u64) -> Nanos {
        self.clock.read(true_ns)
    }

    /// Cuts the region off from the root, or heals the cut.
    pub fn set_partitioned(&mut self, cut: bool) {
        self.partitioned = cut;
    }

    /// The root's lease this region is sub-leasing, if any.
    pub fn upstream_lease_id(&self) -> Option<u64> {
        self.upstream.as_ref().map(|u| u.lease_id)
    }

    /// Requests that got no answer (partition or leader loss).
    pub fn unanswered(&self) -> u64 {
        self.unanswered
    }

    fn holder_id(&self) -> String {
        format!("region-{}", self.id)
    }

    fn next_request(&mut self) -> u64 {
        self.request += 1;
        self.request
    }

    /// One step at the region's own time `now`; the root stamps its commands `root_now`.
    pub fn step(
        &mut self,
        root: &mut RootLink,
        now: Nanos,
        root_now: Nanos,
        demand: u64,
        cfg: &HierarchyConfig,
    ) {
        let at = At {
            now,
            root_now,
            report_every_ms: cfg.report_every_ms,
        };
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
        if let Some(p) = self.pending.take() {
            self.send(root, at, p);
            return;
        }
        let want = (demand * cfg.horizon_ms() / 1_000).max(1);
        if self.upstream.is_none() {
            if now.0 < self.acquire_after_ns {
                return;
            }
            let command = Command::Acquire(Acquire {
                holder_id: self.holder_id(),
                policy_id: POLICY_ID.into(),
                key: KEY.into(),
                want_credit: want,
                demand_milli_per_sec: demand * 1_000,
                request_id: self.next_request(),
                priority: 0,
            });
            self.send(
                root,
                at,
                Pending {
                    command,
                    sent_at: now,
                },
            );
        } else if now.0 >= self.next_report_ns
            || (now.0 >= self.early_refresh_after_ns && self.running_low(want))
        {
            self.next_report_ns = now.0 + cfg.report_every_ms * 1_000_000;
            if let Some(command) = self.report(now, want, demand) {
                self.send(
                    root,
                    at,
                    Pending {
                        command,
                        sent_at: now,
                    },
                );
            }
        }
    }

    /// Refresh before empty: less than half a horizon's demand left to sub-lease.
    fn running_low(&self, want: u64) -> bool {
        self.ledger
            .upstream_position(KEY)
            .is_some_and(|p| 2 * p.idle < want)
    }

    fn send(&mut self, root: &mut RootLink, at: At, p: Pending) {
        if self.partitioned {
            self.unanswered += 1;
            self.pending = Some(p);
            return;
        }
        match root.call(at.root_now, p.command.clone()) {
            Ok(Outcome::Granted(g)) => self.on_grant(at, p.sent_at, &g),
            Ok(Outcome::Denied { retry_after_ns, .. }) => {
                let max_ns = at.report_every_ms * 1_000_000;
                self.acquire_after_ns = at.now.0 + retry_after_ns.clamp(1, max_ns);
            }
            Ok(_) => {}
            // A refused report means the lease is gone: acquire afresh next step.
            Err(super::root::LinkError::Refused(_)) => {
                if matches!(p.command, Command::Report(_)) {
                    self.close_upstream(at.now);
                }
            }
            Err(super::root::LinkError::LeaderLost) => {
                self.unanswered += 1;
                self.pending = Some(p);
            }
        }
    }

    fn report(&mut self, now: Nanos, want: u64, demand: u64) -> Option<Command> {
        let pos = self.ledger.upstream_position(KEY)?;
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
        let up = self.upstream.as_mut()?;
        up.returned += give_back;
        Some(Command::Report(Report {
            holder_id,
            lease_id: up.lease_id,
            used: pos.used,
            return_credit: up.returned,
            want_credit: want.saturating_sub(pos.idle - give_back),
            demand_milli_per_sec: demand * 1_000,
            request_id,
            priority: 0,
        }))
    }

    fn on_grant(&mut self, at: At, sent_at: Nanos, g: &Grant) {
        let now = at.now;
        // A newer policy version comes with a replacement lease: move onto it at once, so
        // traffic is not starved while the old lease runs out. The old lease is never
        // reported on again; the root writes its remainder off at expiry (sub-leases of it
        // may still be spent until then, so it cannot be released with a final usage).
        let lease = g.replacement.as_deref().unwrap_or(&g.lease);
        let deadline_ns = sent_at.0 + lease.ttl_ms * 1_000_000;
        match &mut self.upstream {
            Some(up) if up.lease_id == lease.lease_id => {
                // Early refreshes are spaced out, as at the agents.
                self.early_refresh_after_ns = now.0 + at.report_every_ms * 1_000_000 / 4;
                if lease.generation > up.generation {
                    up.generation = lease.generation;
                    up.deadline_ns = deadline_ns;
                }
            }
            _ => {
                self.close_upstream(now);
                self.upstream = Some(Upstream {
                    lease_id: lease.lease_id,
                    returned: 0,
                    deadline_ns,
                    generation: lease.generation,
                });
            }
        }
        let up = self.upstream.as_ref().expect("set above");
        let cmd = Command::UpstreamGranted(UpstreamLease {
            policy_id: POLICY_ID.into(),
            key: KEY.into(),
            upstream_lease_id: up.lease_id,
            credit: lease.credit,
            deadline: Nanos(up.deadline_ns),
            generation: up.generation,
        });
        // A statement the ledger refuses (less credit than it already has) means the
        // two sides disagree: stop sub-leasing rather than trust either.
        if self.ledger.apply(now, cmd).is_err() {
            self.close_upstream(now);
        }
    }

    fn close_upstream(&mut self, now: Nanos) {
        if self.upstream.take().is_some() {
            let closed = Command::UpstreamClosed {
                key: KEY.into(),
                released: false,
            };
            let _ = self.ledger.apply(now, closed);
        }
    }
}
