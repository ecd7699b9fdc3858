//! The ground truth behind P2 and P3: every lease an agent was granted, as seen on the
//! simulated true clock, and every unit spent under it.
//!
//! The witness sits on the wire between agents and their region's ledger, so it knows what
//! each lease really allowed, whatever the agent believes.

use crate::promises::{Promise, PromiseLog};
use leasehold_common::lease::Lease;
use leasehold_common::ledger::Ledger;
use std::collections::BTreeMap;

/// A lease handed to an agent.
#[derive(Clone, Debug, Default)]
struct Tracked {
    generation: u64,
    /// True time at which the newest version expires.
    expiry_ns: u64,
    spent: u64,
}

/// A crashed holder's lease, which must stay on its grantor's books until it expires.
#[derive(Clone, Debug)]
struct Crashed {
    region: usize,
    lease_id: u64,
    expiry_ns: u64,
}

/// Where and when an agent spent: its region's ledger, the root's, and the true time.
pub struct SpendAt<'a> {
    pub region: usize,
    pub ledger: &'a Ledger,
    pub root: &'a Ledger,
    pub now: u64,
}

/// Watches the leases of one hierarchy's agents.
#[derive(Clone, Debug)]
pub struct Witness {
    leases: BTreeMap<(usize, u64), Tracked>,
    crashed: Vec<Crashed>,
    /// The grantor's write-off grace: the holder must have stopped by expiry plus this.
    grace_ns: u64,
    pub log: PromiseLog,
}

impl Witness {
    pub fn new(grace_ns: u64) -> Self {
        Witness {
            leases: BTreeMap::new(),
            crashed: Vec::new(),
            grace_ns,
            log: PromiseLog::default(),
        }
    }

    /// A region granted or renewed `lease` at true time `true_ns`.
    pub fn granted(&mut self, region: usize, lease: &Lease, true_ns: u64) {
        let t = self.leases.entry((region, lease.lease_id)).or_default();
        if lease.generation > t.generation {
            t.generation = lease.generation;
            t.expiry_ns = true_ns + lease.ttl_ms * 1_000_000;
        }
    }

    /// An agent admitted `units` under `lease_id` of `at.region`.
    pub fn spent(&mut self, at: SpendAt<'_>, lease_id: u64, units: u64) {
        if units == 0 {
            return;
        }
        let (region, now) = (at.region, at.now);
        let Some(t) = self.leases.get_mut(&(region, lease_id)) else {
            self.log.record(Promise::LeaseExpiry, now, || {
                format!("region {region} lease {lease_id}: spent {units} on a lease long gone")
            });
            return;
        };
        t.spent += units;
        if now >= t.expiry_ns + self.grace_ns {
            let late_ms = (now - t.expiry_ns) / 1_000_000;
            self.log.record(Promise::LeaseExpiry, now, || {
                format!("region {region} lease {lease_id}: spent {units} {late_ms} ms after expiry")
            });
        }
        let Some(rec) = at.ledger.lease(lease_id) else {
            self.log.record(Promise::LeaseExpiry, now, || {
                format!(
                    "region {region} lease {lease_id}: spent {units} after the grantor closed it"
                )
            });
            return;
        };
        if t.spent > rec.lease.credit {
            let (spent, credit) = (t.spent, rec.lease.credit);
            self.log.record(Promise::NoDoubleSpend, now, || {
                format!("region {region} lease {lease_id}: spent {spent} of credit {credit}")
            });
        }
        // A sub-lease is carved out of the region's root lease: once the root has closed
        // that (and written off what it did not hear was spent), nothing of it may be spent.
        if let Some(parent) = rec.lease.parent_lease_id {
            if at.root.lease(parent).is_none() {
                self.log.record(Promise::LeaseExpiry, now, || {
                    format!("region {region} lease {lease_id}: spent {units} of root lease {parent} after the root closed it")
                });
            }
        }
    }

    /// The holder of `lease_id` crashed: its credit must stay booked until expiry.
    pub fn crashed(&mut self, region: usize, lease_id: u64) {
        if let Some(t) = self.leases.get(&(region, lease_id)) {
            self.crashed.push(Crashed {
                region,
                lease_id,
                expiry_ns: t.expiry_ns,
            });
        }
    }

    /// Checks that crashed holders' leases are still booked, and forgets leases that can no
    /// longer be spent honestly (so the witness's own state stays bounded).
    pub fn end_of_step(&mut self, regions: &[&Ledger], now: u64) {
        for c in &self.crashed {
            if now < c.expiry_ns && regions[c.region].lease(c.lease_id).is_none() {
                let (region, lease_id) = (c.region, c.lease_id);
                self.log.record(Promise::NoDoubleSpend, now, || {
                    format!("region {region} lease {lease_id}: a crashed holder's credit was released before its lease expired")
                });
            }
        }
        self.crashed.retain(|c| now < c.expiry_ns);
        // Kept a little past the grace so a late spend is still named precisely.
        let keep_ns = 2 * self.grace_ns;
        self.leases.retain(|_, t| now < t.expiry_ns + keep_ns);
    }
}
