//! Sub-lease nesting: root → delegated grantor → holders, under random schedules.
//!
//! The delegated ledger holds one lease from the root at a time, sub-leases only that
//! credit, reports its subtree's aggregate usage upward, hands idle credit back, releases or
//! loses its upstream lease. Holders below it spend, report, release and crash. Checked:
//! units spent by the holders stay within the root policy's `B + r·T` in every window, no
//! sub-lease outlives the upstream lease it was carved from, and both ledgers conserve
//! every unit.

use leasehold_common::lease::Lease;
use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, Outcome, PolicyParams, Release, Report,
    UpstreamLease,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    UpAcquire(u64),
    UpReport {
        give_back_pct: u64,
        want: u64,
    },
    UpRelease,
    Acquire {
        h: usize,
        want: u64,
    },
    Spend {
        h: usize,
        units: u64,
    },
    Report {
        h: usize,
        give_back_pct: u64,
        want: u64,
    },
    Release {
        h: usize,
    },
    Crash {
        h: usize,
    },
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0..3usize;
    prop_oneof![
        4 => prop_oneof![Just(0u64), 1..100 * MS, 100 * MS..2_000 * MS].prop_map(Op::Advance),
        2 => (1..300u64).prop_map(Op::UpAcquire),
        2 => (0..80u64, 0..300u64).prop_map(|(give_back_pct, want)| Op::UpReport { give_back_pct, want }),
        1 => Just(Op::UpRelease),
        3 => (h.clone(), 0..100u64).prop_map(|(h, want)| Op::Acquire { h, want }),
        6 => (h.clone(), 1..60u64).prop_map(|(h, units)| Op::Spend { h, units }),
        3 => (h.clone(), 0..60u64, 0..100u64)
            .prop_map(|(h, give_back_pct, want)| Op::Report { h, give_back_pct, want }),
        1 => h.clone().prop_map(|h| Op::Release { h }),
        1 => h.prop_map(|h| Op::Crash { h }),
        2 => Just(Op::Tick),
    ]
}

#[derive(Clone, Debug)]
struct Held {
    lease_id: u64,
    credit: u64,
    spent: u64,
    deadline: u64,
    generation: u64,
    /// Credit handed back over the lease's life (reports carry the running total).
    returned: u64,
}

fn held(lease: &Lease, sent_at: u64) -> Held {
    Held {
        lease_id: lease.lease_id,
        credit: lease.credit,
        spent: 0,
        deadline: sent_at + lease.ttl_ms * MS,
        generation: lease.generation,
        returned: 0,
    }
}

struct World {
    root: Ledger,
    region: Ledger,
    params: PolicyParams,
    now: u64,
    request: u64,
    upstream: Option<Held>,
    holders: Vec<(u32, Vec<Held>)>,
    admitted: Vec<(u64, u64)>,
}

impl World {
    fn new(rate: u64, burst: u64, root_ttl_ms: u64, sub_ttl_ms: u64) -> World {
        let lease = |ttl_ms| LeaseParams {
            ttl_ms,
            min_credit: 1,
            max_credit: 1_000,
            reserve_ppm: 0,
            reserve_priority_min: 8,
            refresh_horizon_ms: 500,
        };
        let params = PolicyParams {
            weights: Default::default(),
            window: None,
            owner: Default::default(),
            exact: false,
            policy_id: "p".into(),
            version: 1,
            rate: Rate::per_second(rate).unwrap(),
            burst,
            lease: lease(root_ttl_ms),
        };
        let mut root = Ledger::new(LedgerConfig::root("global"));
        root.apply(Nanos(0), Command::PutPolicy(params.clone()))
            .unwrap();
        let mut region = Ledger::new(LedgerConfig::delegated("region"));
        let sub = PolicyParams {
            weights: Default::default(),
            window: None,
            owner: Default::default(),
            exact: false,
            lease: lease(sub_ttl_ms),
            ..params.clone()
        };
        region.apply(Nanos(0), Command::PutPolicy(sub)).unwrap();
        World {
            root,
            region,
            params,
            now: 0,
            request: 0,
            upstream: None,
            holders: vec![(0, Vec::new()); 3],
            admitted: Vec::new(),
        }
    }

    fn next_request(&mut self) -> u64 {
        self.request += 1;
        self.request
    }

    fn step(&mut self, op: Op) {
        self.drop_upstream_if_expired();
        match op {
            Op::Advance(ns) => self.now += ns,
            Op::UpAcquire(want) => self.up_acquire(want),
            Op::UpReport {
                give_back_pct,
                want,
            } => self.up_report(give_back_pct, want),
            Op::UpRelease => self.up_release(),
            Op::Acquire { h, want } => self.acquire(h, want),
            Op::Spend { h, units } => {
                let t = self.now;
                if let Some(l) = self.holders[h]
                    .1
                    .iter_mut()
                    .find(|l| t < l.deadline && l.credit - l.spent >= units)
                {
                    l.spent += units;
                    self.admitted.push((t, units));
                }
            }
            Op::Report {
                h,
                give_back_pct,
                want,
            } => self.report(h, give_back_pct, want),
            Op::Release { h } => {
                if let Some(l) = self.holders[h].1.pop() {
                    let cmd = Command::Release(Release {
                        holder_id: format!("a{h}-{}", self.holders[h].0),
                        lease_id: l.lease_id,
                        final_used: l.spent,
                        request_id: self.next_request(),
                    });
                    let _ = self.region.apply(Nanos(self.now), cmd);
                }
            }
            Op::Crash { h } => {
                self.holders[h].0 += 1;
                self.holders[h].1.clear();
            }
            Op::Tick => {
                self.root.apply(Nanos(self.now), Command::Tick).unwrap();
                self.region.apply(Nanos(self.now), Command::Tick).unwrap();
            }
        }
        assert!(self.root.conserved(), "root lost or minted a unit");
        assert!(self.region.conserved(), "region lost or minted a unit");
    }

    /// The region's own holder-side view: once its upstream lease's deadline passes it
    /// stops using it, and the region's ledger writes off what was idle.
    fn drop_upstream_if_expired(&mut self) {
        if let Some(up) = &self.upstream {
            if self.now >= up.deadline {
                self.upstream = None;
                let cmd = Command::UpstreamClosed {
                    key: "k".into(),
                    released: false,
                };
                self.region.apply(Nanos(self.now), cmd).unwrap();
            }
        }
    }

    fn upstream_grant(&mut self, lease: &Lease, deadline: u64) {
        let cmd = Command::UpstreamGranted(UpstreamLease {
            policy_id: "p".into(),
            key: "k".into(),
            upstream_lease_id: lease.lease_id,
            credit: lease.credit,
            deadline: Nanos(deadline),
            generation: lease.generation,
        });
        self.region.apply(Nanos(self.now), cmd).unwrap();
    }

    fn up_acquire(&mut self, want: u64) {
        if self.upstream.is_some() {
            return;
        }
        let cmd = Command::Acquire(Acquire {
            holder_id: "region".into(),
            policy_id: "p".into(),
            key: "k".into(),
            want_credit: want,
            demand_milli_per_sec: 0,
            request_id: self.next_request(),
            priority: 0,
        });
        if let Ok(Outcome::Granted(g)) = self.root.apply(Nanos(self.now), cmd) {
            let h = held(&g.lease, self.now);
            self.upstream_grant(&g.lease, h.deadline);
            self.upstream = Some(h);
        }
    }

    fn up_report(&mut self, give_back_pct: u64, want: u64) {
        let Some(up) = self.upstream.clone() else {
            return;
        };
        let pos = self
            .region
            .upstream_position("k")
            .expect("region holds upstream");
        let give_back = pos.idle * give_back_pct / 100;
        let ret = Command::UpstreamReturn {
            key: "k".into(),
            units: give_back,
        };
        self.region.apply(Nanos(self.now), ret).unwrap();
        let returned = up.returned + give_back;
        let cmd = Command::Report(Report {
            holder_id: "region".into(),
            lease_id: up.lease_id,
            used: pos.used,
            return_credit: returned,
            want_credit: want,
            demand_milli_per_sec: 0,
            request_id: self.next_request(),
            priority: 0,
        });
        let g = match self.root.apply(Nanos(self.now), cmd) {
            Ok(Outcome::Granted(g)) => g,
            other => panic!("root refused an honest report: {other:?}"),
        };
        let mut mine = up;
        mine.returned = returned;
        mine.credit = g.lease.credit;
        if g.lease.generation > mine.generation {
            mine.generation = g.lease.generation;
            mine.deadline = self.now + g.lease.ttl_ms * MS;
        }
        self.upstream_grant(&g.lease, mine.deadline);
        self.upstream = Some(mine);
    }

    /// Releases the upstream lease once no sub-lease of it is out (before that, its credit
    /// may still be spent and must stay outstanding upstream).
    fn up_release(&mut self) {
        let Some(pos) = self.region.upstream_position("k") else {
            return;
        };
        let Some(final_used) = pos.final_used() else {
            return;
        };
        let Some(up) = self.upstream.take() else {
            return;
        };
        let cmd = Command::Release(Release {
            holder_id: "region".into(),
            lease_id: up.lease_id,
            final_used,
            request_id: self.next_request(),
        });
        self.root.apply(Nanos(self.now), cmd).unwrap();
        let closed = Command::UpstreamClosed {
            key: "k".into(),
            released: true,
        };
        self.region.apply(Nanos(self.now), closed).unwrap();
    }

    fn check_inside_upstream(&self, lease: &Lease) {
        let up = self
            .upstream
            .as_ref()
            .expect("sub-lease granted without upstream");
        assert!(
            lease.grantor_expiry_ns() <= up.deadline,
            "sub-lease expires at {} after its upstream deadline {}",
            lease.grantor_expiry_ns(),
            up.deadline
        );
    }

    fn acquire(&mut self, h: usize, want: u64) {
        let cmd = Command::Acquire(Acquire {
            holder_id: format!("a{h}-{}", self.holders[h].0),
            policy_id: "p".into(),
            key: "k".into(),
            want_credit: want,
            demand_milli_per_sec: 0,
            request_id: self.next_request(),
            priority: 0,
        });
        if let Ok(Outcome::Granted(g)) = self.region.apply(Nanos(self.now), cmd) {
            self.check_inside_upstream(&g.lease);
            self.holders[h].1.push(held(&g.lease, self.now));
        }
    }

    fn report(&mut self, h: usize, give_back_pct: u64, want: u64) {
        let now = self.now;
        let Some(idx) = self.holders[h].1.iter().position(|l| now < l.deadline) else {
            return;
        };
        let l = self.holders[h].1[idx].clone();
        let give_back = (l.credit - l.spent) * give_back_pct / 100;
        self.holders[h].1[idx].credit -= give_back;
        self.holders[h].1[idx].returned += give_back;
        let returned = self.holders[h].1[idx].returned;
        let cmd = Command::Report(Report {
            holder_id: format!("a{h}-{}", self.holders[h].0),
            lease_id: l.lease_id,
            used: l.spent,
            return_credit: returned,
            want_credit: want,
            demand_milli_per_sec: 0,
            request_id: self.next_request(),
            priority: 0,
        });
        let Ok(Outcome::Granted(g)) = self.region.apply(Nanos(now), cmd) else {
            return;
        };
        let mine = &mut self.holders[h].1[idx];
        mine.credit = g.lease.credit;
        if g.lease.generation > mine.generation {
            mine.generation = g.lease.generation;
            mine.deadline = now + g.lease.ttl_ms * MS;
            self.check_inside_upstream(&g.lease);
        }
    }

    fn check_windows(&self) {
        for i in 0..self.admitted.len() {
            let mut sum = 0;
            for j in i..self.admitted.len() {
                sum += self.admitted[j].1;
                let span = self.admitted[j].0 - self.admitted[i].0;
                let bound = self.params.burst + self.params.rate.units_in(span);
                assert!(sum <= bound, "window {span} ns: {sum} > {bound}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn subtree_spend_stays_within_root_bound_and_inside_upstream_leases(
        rate in 1..300u64,
        burst in 1..500u64,
        root_ttl_ms in 100..3_000u64,
        sub_ttl_ms in 50..5_000u64,
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let mut w = World::new(rate, burst, root_ttl_ms, sub_ttl_ms);
        for op in ops {
            w.step(op);
        }
        w.check_windows();
    }
}
