//! P2 across agent crashes, from the grantor's books: a crashed agent's leases must be
//! settled as spent by at least what the agent admitted under them, or credit it spent
//! would be granted again.
//!
//! At each agent crash the run notes which leases the grantor holds for that agent, follows
//! their credit while they stay on the books (a report already on the wire may still land),
//! and at the end reads how each one left the books: released (by the agent's next run,
//! from its state file, with `final_used` = its mark) or written off at expiry (counted spent
//! in full). The agent holds one lease at a time per key and spends a lease only once it has
//! received it, so what it admitted under the leases of a crashed run is what it admitted
//! from receiving the first of them to the crash ([`super::receipts`]), less what is
//! stamped at that very instant when an earlier lease of the run may have spent it.

use super::check::Admission;
use super::cluster::{leader_of, NodeSlots};
use super::hosts::agent_host;
use super::receipts::LeaseReceipts;
use leasehold_allocator::replica::{LocalReplica, Replica};
use leasehold_allocator::state::AllocatorState;
use leasehold_common::ledger::{ClosedAs, Ledger, Outcome};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// The books of the grantor the agents lease from.
pub(super) enum Books {
    /// A single-node allocator.
    Single(Arc<Mutex<Option<LocalReplica<AllocatorState>>>>),
    /// A Raft cluster (the global allocators, or the region): read on its leader.
    Nodes(NodeSlots),
}

impl Books {
    /// Reads the ledger; None while there is none to read (no leader, not started).
    pub fn read<R, F>(&self, up: impl Fn(usize) -> bool, f: F) -> Option<R>
    where
        R: Send + 'static,
        F: FnOnce(&Ledger) -> R + Send + 'static,
    {
        match self {
            Books::Single(slot) => {
                let replica = slot.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
                let mut read = std::pin::pin!(replica.read(move |s| f(s.ledger())));
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                // A single-node replica answers reads at once.
                match read.as_mut().poll(&mut cx) {
                    std::task::Poll::Ready(r) => r.ok(),
                    std::task::Poll::Pending => None,
                }
            }
            Books::Nodes(nodes) => {
                let (index, _, _) = leader_of(&nodes.metrics(up))?;
                Some(nodes.get(index)?.read_local(|s| f(s.ledger())))
            }
        }
    }
}

/// A crashed agent's lease as the grantor last had it on its books.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Booked {
    credit: u64,
    /// Its credit when the agent crashed, before any report still on the wire landed.
    at_crash: u64,
    /// Seen leaving the books: its credit no longer changes.
    closed: bool,
}

#[derive(Clone, Debug)]
struct Crash {
    agent: u32,
    at_ns: u64,
    /// When the run that crashed started, and when the next one did (or the run ended).
    run_from_ns: u64,
    run_until_ns: Option<u64>,
    leases: BTreeMap<u64, Booked>,
}

/// The agent crashes of a run and the leases they left on the grantor's books.
#[derive(Debug, Default)]
pub(super) struct CrashLedger {
    crashes: Vec<Crash>,
    /// When each agent's current run started, in nanoseconds of simulated time.
    run_from_ns: BTreeMap<u32, u64>,
}

impl CrashLedger {
    /// Agent `agent` crashes now: notes the leases the grantor holds for it.
    pub fn crashed(&mut self, agent: u32, at_ns: u64, leases: BTreeMap<u64, u64>) {
        self.crashes.push(Crash {
            agent,
            at_ns,
            run_from_ns: self.run_from_ns.get(&agent).copied().unwrap_or(0),
            run_until_ns: None,
            leases: leases
                .into_iter()
                .map(|(id, credit)| {
                    let closed = false;
                    let at_crash = credit;
                    (
                        id,
                        Booked {
                            credit,
                            at_crash,
                            closed,
                        },
                    )
                })
                .collect(),
        });
    }

    /// Agent `agent` starts again now.
    pub fn restarted(&mut self, agent: u32, at_ns: u64) {
        self.run_from_ns.insert(agent, at_ns);
        for c in self.crashes.iter_mut().filter(|c| c.agent == agent) {
            c.run_until_ns.get_or_insert(at_ns);
        }
    }

    /// The noted leases not yet seen leaving the books.
    pub fn followed(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .crashes
            .iter()
            .flat_map(|c| c.leases.iter())
            .filter(|(_, b)| !b.closed)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Updates the followed leases from the books (see [`booked`]).
    pub fn follow(&mut self, books: &BTreeMap<u64, Option<u64>>) {
        for c in &mut self.crashes {
            for (id, booked) in c.leases.iter_mut() {
                match books.get(id) {
                    Some(Some(credit)) => booked.credit = *credit,
                    Some(None) => booked.closed = true,
                    None => {}
                }
            }
        }
    }

    /// Every lease noted at a crash, for [`closings`].
    pub fn noted(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .crashes
            .iter()
            .flat_map(|c| c.leases.keys().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// How each crashed run's leases were settled, given how they left the books.
    pub fn settle(
        &self,
        closings: &BTreeMap<u64, (ClosedAs, u64)>,
        receipts: &LeaseReceipts,
        admissions: &[Admission],
    ) -> Vec<Settlement> {
        self.crashes
            .iter()
            .map(|c| settle_one(c, closings, receipts, admissions))
            .collect()
    }
}

/// Of `ids`, those the books know: id → its credit while live, None once closed.
pub(super) fn booked(ledger: &Ledger, ids: &[u64]) -> BTreeMap<u64, Option<u64>> {
    ids.iter()
        .filter_map(|id| match ledger.lease(*id) {
            Some(r) => Some((*id, Some(r.lease.credit))),
            None => ledger.tombstone(*id).map(|_| (*id, None)),
        })
        .collect()
}

/// Of `ids`, those that left the books: id → (how, credit taken back).
pub(super) fn closings(ledger: &Ledger, ids: &[u64]) -> BTreeMap<u64, (ClosedAs, u64)> {
    ids.iter()
        .filter_map(|id| {
            let t = ledger.tombstone(*id)?;
            let reclaimed = match t.outcome {
                Outcome::Released { reclaimed, .. } => reclaimed,
                _ => 0,
            };
            Some((*id, (t.closed_as, reclaimed)))
        })
        .collect()
}

/// The leases `ledger` holds for agent `agent`: id → credit.
pub(super) fn holder_leases(ledger: &Ledger, agent: u32) -> BTreeMap<u64, u64> {
    let holder = agent_host(agent as usize);
    ledger
        .leases()
        .filter(|r| r.lease.holder_id == holder)
        .map(|r| (r.lease.lease_id, r.lease.credit))
        .collect()
}

fn settle_one(
    c: &Crash,
    closings: &BTreeMap<u64, (ClosedAs, u64)>,
    receipts: &LeaseReceipts,
    admissions: &[Admission],
) -> Settlement {
    let mut s = Settlement {
        agent: c.agent,
        crash_at_ms: c.at_ns / 1_000_000,
        ..Settlement::default()
    };
    let mut first_ns = None::<u64>;
    for (&id, booked) in &c.leases {
        // Only the crashed run's own leases: an earlier run's were judged at its crash.
        let Some(at) = receipts.received_at_ns(c.agent, id) else {
            continue;
        };
        if at < c.run_from_ns || at > c.at_ns {
            continue;
        }
        first_ns = Some(first_ns.map_or(at, |f| f.min(at)));
        s.leases += 1;
        s.credit_at_crash += booked.at_crash;
        match closings.get(&id) {
            Some(&(ClosedAs::Released, reclaimed)) => {
                s.released += 1;
                s.released_used += booked.credit.saturating_sub(reclaimed);
            }
            Some(&(ClosedAs::Expired, _)) => {
                s.expired += 1;
                s.expired_used += booked.credit;
            }
            // Still on the books: at most its credit will be counted spent.
            None => {
                s.open += 1;
                s.open_credit += booked.credit;
            }
        }
    }
    if let Some(from) = first_ns {
        let until = c.run_until_ns.unwrap_or(u64::MAX);
        // Admissions are stamped at their round's start, so one stamped at the very instant
        // the first of these leases arrived may have been spent under an earlier lease of
        // the run (a replacement is spent only after the lease it replaces was released).
        // Only with no earlier lease in the run is it surely under these.
        let earlier = receipts
            .versions(c.agent)
            .iter()
            .any(|v| v.received_ns >= c.run_from_ns && v.received_ns < from);
        s.admitted = admissions
            .iter()
            .filter(|a| a.agent == c.agent && a.at_ns < until)
            .filter(|a| a.at_ns > from || (a.at_ns == from && !earlier))
            .count() as u64;
    }
    s
}

/// How the leases a crashed agent run held were settled, against what it admitted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settlement {
    pub agent: u32,
    pub crash_at_ms: u64,
    /// Leases of the crashed run the grantor still had on its books at the crash.
    pub leases: usize,
    /// Admitted by the agent from receiving the first of them to the crash.
    pub admitted: u64,
    /// Their credit on the grantor's books at the crash: what the grantor had handed the
    /// run under them and not yet taken back.
    pub credit_at_crash: u64,
    /// Released (by the agent's next run, from its state file): how many, and the final
    /// usage the grantor booked for them (credit less what it took back).
    pub released: usize,
    pub released_used: u64,
    /// Written off at expiry, counted spent in full: how many, and their credit.
    pub expired: usize,
    pub expired_used: u64,
    /// Still on the books at the end: how many, and their credit (the most they can be
    /// counted spent).
    pub open: usize,
    pub open_credit: u64,
}

impl Settlement {
    /// What the grantor counts (or may still count) spent under these leases.
    pub fn charged(&self) -> u64 {
        self.released_used + self.expired_used + self.open_credit
    }

    /// Credit the crashed run held and had not spent: its leases' credit at the crash less
    /// what it admitted under them (zero when it crashed right after spending all it held).
    pub fn unspent_at_crash(&self) -> u64 {
        self.credit_at_crash.saturating_sub(self.admitted)
    }

    /// P2: nothing the agent spent goes back to the grantor to be granted again.
    pub fn holds(&self) -> bool {
        self.charged() >= self.admitted
    }

    /// How the leases left the books, in words: released, written off, still open.
    pub fn books(&self) -> String {
        format!(
            "released {} at mark {}, written off {} ({} units), open {} ({} units)",
            self.released,
            self.released_used,
            self.expired,
            self.expired_used,
            self.open,
            self.open_credit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn admissions(agent: u32, at_ms: impl IntoIterator<Item = u64>) -> Vec<Admission> {
        at_ms
            .into_iter()
            .map(|ms| Admission {
                at_ns: ms * MS,
                agent,
            })
            .collect()
    }

    /// Agent 0 runs from 1 s, receives lease 7 (credit 100) at 2 s, admits 60 under it, and
    /// crashes at 3 s; it restarts at 4 s and admits 5 more under a new lease.
    fn one_crash(reclaimed: u64, closed_as: ClosedAs) -> Settlement {
        let receipts = LeaseReceipts::default();
        receipts.note_version_at(0, 7, 0, 2_000 * MS, 2_000);
        let mut crashes = CrashLedger::default();
        crashes.restarted(0, 1_000 * MS);
        crashes.crashed(0, 3_000 * MS, BTreeMap::from([(7, 100)]));
        crashes.restarted(0, 4_000 * MS);
        let mut log = admissions(0, 1_500..1_510); // under an earlier, closed lease
        log.extend(admissions(0, 2_000..2_060));
        log.extend(admissions(1, 2_000..2_050)); // another agent
        log.extend(admissions(0, 4_000..4_005)); // the next run
        let closings = BTreeMap::from([(7, (closed_as, reclaimed))]);
        let mut out = crashes.settle(&closings, &receipts, &log);
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    #[test]
    fn a_release_below_what_was_admitted_breaks_p2() {
        let under = one_crash(41, ClosedAs::Released);
        assert_eq!((under.admitted, under.released_used), (60, 59));
        assert!(!under.holds());
        let exact = one_crash(40, ClosedAs::Released);
        assert!(exact.holds());
    }

    #[test]
    fn an_expired_lease_counts_its_whole_credit_and_an_open_one_at_most_that() {
        let expired = one_crash(0, ClosedAs::Expired);
        assert_eq!((expired.expired, expired.charged()), (1, 100));
        assert_eq!(
            (expired.credit_at_crash, expired.unspent_at_crash()),
            (100, 40)
        );
        assert!(expired.holds());
        let receipts = LeaseReceipts::default();
        receipts.note_version_at(0, 7, 0, 2_000 * MS, 2_000);
        let mut crashes = CrashLedger::default();
        crashes.crashed(0, 3_000 * MS, BTreeMap::from([(7, 100)]));
        let open = crashes.settle(&BTreeMap::new(), &receipts, &admissions(0, 2_000..2_060));
        assert_eq!((open[0].open, open[0].open_credit), (1, 100));
    }

    #[test]
    fn credit_followed_after_the_crash_is_what_a_release_is_measured_against() {
        let receipts = LeaseReceipts::default();
        receipts.note_version_at(0, 7, 0, 2_000 * MS, 2_000);
        let mut crashes = CrashLedger::default();
        crashes.crashed(0, 3_000 * MS, BTreeMap::from([(7, 100)]));
        // A report sent before the crash lands after it and hands 30 units back.
        assert_eq!(crashes.followed(), vec![7]);
        crashes.follow(&BTreeMap::from([(7, Some(70))]));
        crashes.follow(&BTreeMap::from([(7, None)]));
        assert!(crashes.followed().is_empty());
        let closings = BTreeMap::from([(7, (ClosedAs::Released, 10))]);
        let s = crashes.settle(&closings, &receipts, &admissions(0, 2_000..2_060));
        assert_eq!(s[0].released_used, 60);
        assert!(s[0].holds());
        // Held unspent at the crash: the credit then, not after the late report.
        assert_eq!(s[0].unspent_at_crash(), 40);
    }
}
