//! P1 and P2 for a root ledger under random schedules of honest and crashing holders.
//!
//! Holders spend their leased credit at random times, report, hand back, release, crash
//! (losing unreported spend), and see policy versions change and clock readings step back.
//! Every admitted unit is recorded with its true time, and every window of admissions is
//! checked against `B + r·T`; after every step, every unit the ledger ever had must be
//! accounted for exactly once.

use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, Outcome, PolicyParams, Release, Report,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
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
    Rollback(u64),
    NewVersion,
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0..3usize;
    prop_oneof![
        4 => prop_oneof![Just(0u64), 1..50 * MS, 50 * MS..3_000 * MS].prop_map(Op::Advance),
        3 => (h.clone(), 0..400u64).prop_map(|(h, want)| Op::Acquire { h, want }),
        6 => (h.clone(), 1..120u64).prop_map(|(h, units)| Op::Spend { h, units }),
        3 => (h.clone(), 0..60u64, 0..300u64)
            .prop_map(|(h, give_back_pct, want)| Op::Report { h, give_back_pct, want }),
        1 => h.clone().prop_map(|h| Op::Release { h }),
        1 => h.prop_map(|h| Op::Crash { h }),
        2 => Just(Op::Tick),
        1 => (1..5_000 * MS).prop_map(Op::Rollback),
        1 => Just(Op::NewVersion),
    ]
}

/// A lease as an honest holder sees it.
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

#[derive(Default)]
struct Holder {
    incarnation: u32,
    next_request: u64,
    leases: Vec<Held>,
}

impl Holder {
    fn id(&self, h: usize) -> String {
        format!("h{h}-{}", self.incarnation)
    }
    fn request(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }
}

struct World {
    ledger: Ledger,
    params: PolicyParams,
    now: u64,
    holders: Vec<Holder>,
    admitted: Vec<(u64, u64)>,
    spent_total: u64,
    /// Spent before the key's current account was created (an idle key may be dropped
    /// and later recreated with fresh statistics).
    spent_before_account: u64,
}

impl World {
    fn new(rate: u64, burst: u64, ttl_ms: u64, max_credit: u64) -> World {
        let params = PolicyParams {
            weights: Default::default(),
            window: None,
            owner: Default::default(),
            exact: false,
            policy_id: "p".into(),
            version: 1,
            rate: Rate::per_second(rate).unwrap(),
            burst,
            lease: LeaseParams {
                ttl_ms,
                min_credit: 1,
                max_credit,
                reserve_ppm: 50_000,
                reserve_priority_min: 8,
                refresh_horizon_ms: 500,
            },
        };
        let mut ledger = Ledger::new(LedgerConfig::root("g"));
        ledger
            .apply(Nanos(0), Command::PutPolicy(params.clone()))
            .unwrap();
        World {
            ledger,
            params,
            now: 0,
            holders: (0..3).map(|_| Holder::default()).collect(),
            admitted: Vec::new(),
            spent_total: 0,
            spent_before_account: 0,
        }
    }

    fn step(&mut self, op: Op) {
        let now = Nanos(self.now);
        match op {
            Op::Advance(ns) => self.now += ns,
            Op::Acquire { h, want } => {
                let request_id = self.holders[h].request();
                let cmd = Command::Acquire(Acquire {
                    holder_id: self.holders[h].id(h),
                    policy_id: "p".into(),
                    key: "k".into(),
                    want_credit: want,
                    demand_milli_per_sec: 0,
                    request_id,
                    priority: 0,
                });
                if let Ok(Outcome::Granted(g)) = self.ledger.apply(now, cmd) {
                    self.holders[h].leases.push(held(&g.lease, self.now));
                }
            }
            Op::Spend { h, units } => {
                let t = self.now;
                if let Some(l) = self.holders[h]
                    .leases
                    .iter_mut()
                    .find(|l| t < l.deadline && l.credit - l.spent >= units)
                {
                    l.spent += units;
                    self.admitted.push((t, units));
                    self.spent_total += units;
                }
            }
            Op::Report {
                h,
                give_back_pct,
                want,
            } => self.report(h, give_back_pct, want),
            Op::Release { h } => {
                let Some(l) = self.holders[h].leases.pop() else {
                    return;
                };
                let request_id = self.holders[h].request();
                let cmd = Command::Release(Release {
                    holder_id: self.holders[h].id(h),
                    lease_id: l.lease_id,
                    final_used: l.spent,
                    request_id,
                });
                // A release refused (already expired and written off) changes nothing;
                // the holder has stopped spending either way.
                let _ = self.ledger.apply(now, cmd);
            }
            Op::Crash { h } => {
                let hol = &mut self.holders[h];
                hol.leases.clear();
                hol.incarnation += 1;
                hol.next_request = 0;
            }
            Op::Tick => {
                self.ledger.apply(now, Command::Tick).unwrap();
            }
            Op::Rollback(ns) => {
                let back = Nanos(self.now.saturating_sub(ns));
                self.ledger.apply(back, Command::Tick).unwrap();
            }
            Op::NewVersion => {
                self.params.version += 1;
                let cmd = Command::PutPolicy(self.params.clone());
                self.ledger.apply(now, cmd).unwrap();
            }
        }
    }

    fn report(&mut self, h: usize, give_back_pct: u64, want: u64) {
        let now = self.now;
        let Some(idx) = self.holders[h].leases.iter().position(|l| now < l.deadline) else {
            return;
        };
        let l = self.holders[h].leases[idx].clone();
        let give_back = (l.credit - l.spent) * give_back_pct / 100;
        // Handed-back credit stops being spendable before the report leaves.
        self.holders[h].leases[idx].credit -= give_back;
        self.holders[h].leases[idx].returned += give_back;
        let returned = self.holders[h].leases[idx].returned;
        let request_id = self.holders[h].request();
        let cmd = Command::Report(Report {
            holder_id: self.holders[h].id(h),
            lease_id: l.lease_id,
            used: l.spent,
            return_credit: returned,
            want_credit: want,
            demand_milli_per_sec: 0,
            request_id,
            priority: 0,
        });
        let Ok(Outcome::Granted(g)) = self.ledger.apply(Nanos(now), cmd) else {
            return;
        };
        let mine = &mut self.holders[h].leases[idx];
        assert_eq!(g.lease.credit, mine.credit + g.added);
        mine.credit = g.lease.credit;
        if g.lease.generation > mine.generation {
            mine.generation = g.lease.generation;
            mine.deadline = now + g.lease.ttl_ms * MS;
        }
        if let Some(new) = g.replacement {
            // Stop spending the old lease and release it with its final usage.
            let old = self.holders[h].leases.remove(idx);
            let request_id = self.holders[h].request();
            let rel = Command::Release(Release {
                holder_id: self.holders[h].id(h),
                lease_id: old.lease_id,
                final_used: old.spent,
                request_id,
            });
            self.ledger.apply(Nanos(now), rel).unwrap();
            self.holders[h].leases.push(held(&new, now));
        }
    }

    fn check_accounting(&mut self) {
        assert!(self.ledger.conserved(), "a unit was lost or minted");
        let Some(acct) = self.ledger.account("k") else {
            assert_eq!(
                self.ledger.leases().count(),
                0,
                "key dropped with leases out"
            );
            self.spent_before_account = self.spent_total;
            return;
        };
        let s = &acct.stats;
        assert!(
            self.spent_total - self.spent_before_account <= s.used + acct.outstanding + s.stranded,
            "holders spent credit the ledger does not count as out"
        );
        assert!(
            s.granted - s.reclaimed <= s.initial + s.produced,
            "more credit became spendable than the bucket ever produced"
        );
    }

    fn check_windows(&self) {
        let rate = self.params.rate;
        for i in 0..self.admitted.len() {
            let mut sum = 0u64;
            for j in i..self.admitted.len() {
                sum += self.admitted[j].1;
                let span = self.admitted[j].0 - self.admitted[i].0;
                let bound = self.params.burst + rate.units_in(span);
                assert!(
                    sum <= bound,
                    "window of {span} ns admitted {sum} > bound {bound}"
                );
            }
        }
    }
}

fn held(lease: &leasehold_common::lease::Lease, sent_at: u64) -> Held {
    Held {
        lease_id: lease.lease_id,
        credit: lease.credit,
        spent: 0,
        deadline: sent_at + lease.ttl_ms * MS,
        generation: lease.generation,
        returned: 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn admitted_never_exceeds_burst_plus_rate_and_nothing_is_double_spent(
        rate in 1..400u64,
        burst in 1..600u64,
        ttl_ms in 50..3_000u64,
        max_credit in 1..500u64,
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let mut w = World::new(rate, burst, ttl_ms, max_credit);
        for op in ops {
            w.step(op);
            w.check_accounting();
        }
        w.check_windows();
    }
}
