//! One policy key's credit: where it comes from, what is out on lease, and who holds it.

use super::command::Outcome;
use super::entitlement::Entitlement;
use super::holders::Holders;
use super::window::WindowSupply;
use crate::algo::TokenBucket;
use crate::lease::LeaseId;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Upstream credit closer than this to its deadline is not sub-leased: a sub-lease of less
/// than a millisecond cannot be spent.
const MIN_SUBLEASE_NS: u64 = 1_000_000;

/// Credit flows of one key, in units. Conservation (checked by [`Account::conserved`]):
/// `initial + produced + received = available + outstanding + used + stranded + dropped +
/// returned_upstream + lost_upstream + lapsed`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyStats {
    /// Credit the root bucket held when the key was created.
    pub initial: u64,
    /// Credit minted by the root bucket's refill.
    pub produced: u64,
    /// Credit received from upstream leases (delegated ledgers).
    pub received: u64,
    /// Credit put on lease, renewals included.
    pub granted: u64,
    /// Credit holders reported spent.
    pub used: u64,
    /// Credit handed back by holders (returns and releases).
    pub reclaimed: u64,
    /// Credit written off: leases that expired with unreported credit.
    pub stranded: u64,
    /// Credit that did not fit back under a lowered cap.
    pub dropped: u64,
    /// Idle credit returned to the upstream grantor.
    pub returned_upstream: u64,
    /// Idle credit lost because the upstream lease ran out.
    pub lost_upstream: u64,
    /// Window credit that ended unspent: free when its window ended, or handed back after.
    #[serde(default)]
    pub lapsed: u64,
}

/// A delegated key's credit, received through one upstream lease at a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamSupply {
    /// Received and not on lease.
    pub idle: u64,
    pub lease_id: Option<LeaseId>,
    /// Cumulative credit of the upstream lease seen so far, less what was returned.
    pub credit_known: u64,
    /// Credit of this upstream lease that sub-holders reported spent or let expire: the
    /// usage to report upstream (never decreases while the lease lives).
    pub consumed: u64,
    /// Credit of this upstream lease out on sub-leases.
    pub on_lease: u64,
    /// Stop sub-leasing at this time; sub-leases expire no later.
    pub deadline: Nanos,
    /// Generation of the upstream lease version `deadline` was measured for.
    #[serde(default)]
    pub generation: u64,
    /// Idle credit given back on this upstream lease so far: the cumulative `return_credit`
    /// of its reports.
    #[serde(default)]
    pub returned: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Supply {
    Bucket(TokenBucket),
    Upstream(UpstreamSupply),
    /// A fixed or sliding window's or a calendar period's allowance.
    Window(WindowSupply),
}

/// Where a lease's credit came from, for giving it back.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The upstream lease a sub-lease was carved from.
    pub parent: Option<LeaseId>,
    /// When the lease's current version was issued: window credit goes back only to the
    /// window it was granted in.
    pub issued_at: Nanos,
}

/// What the ledger remembers about one holder of one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderSlot {
    /// The lease the holder renews; older ones may still be outstanding.
    pub current: Option<LeaseId>,
    pub demand_milli_per_sec: u64,
    pub priority: u32,
    pub last_seen: Nanos,
    /// Highest request id seen and its answer, so a retry gets the same answer.
    pub last_request_id: u64,
    pub last_outcome: Option<Outcome>,
    /// The share the holder earned on a contended key and has not yet been granted.
    #[serde(default)]
    pub entitled: Entitlement,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub policy_id: String,
    /// Policy version the supply was last configured with.
    pub version: u64,
    pub supply: Supply,
    /// Credit on lease that is neither reported spent, handed back, nor written off.
    pub outstanding: u64,
    /// Live lease records of this key.
    pub leases: u64,
    pub holders: Holders,
    pub stats: KeyStats,
}

impl Account {
    pub fn new(policy_id: String, version: u64, supply: Supply) -> Self {
        let initial = match &supply {
            Supply::Bucket(b) => b.tokens(),
            Supply::Upstream(u) => u.idle,
            Supply::Window(w) => w.free,
        };
        Account {
            policy_id,
            version,
            supply,
            outstanding: 0,
            leases: 0,
            holders: Holders::new(),
            stats: KeyStats {
                initial,
                ..KeyStats::default()
            },
        }
    }

    /// Refills the root bucket up to its burst minus outstanding credit (so that stored plus
    /// leased credit never exceeds the burst) and returns the credit free to grant.
    pub fn available(&mut self, now: Nanos) -> u64 {
        let outstanding = self.outstanding;
        match &mut self.supply {
            Supply::Bucket(b) => {
                let before = b.tokens();
                let cap = b.burst().saturating_sub(outstanding);
                b.refill_capped(now, cap);
                self.stats.produced += b.tokens().saturating_sub(before);
                b.tokens()
            }
            Supply::Upstream(u) if u.deadline.saturating_since(now) >= MIN_SUBLEASE_NS => u.idle,
            Supply::Upstream(_) => 0,
            Supply::Window(w) => {
                let rolled = w.roll(now);
                self.stats.produced += rolled.minted;
                self.stats.lapsed += rolled.lapsed;
                w.grantable(now)
            }
        }
    }

    /// Moves `units` from free credit onto a lease. The caller refilled (through
    /// [`available`](Self::available)) at this time and checked availability.
    pub fn put_on_lease(&mut self, units: u64) {
        let taken = match &mut self.supply {
            Supply::Bucket(b) => b.take_exact(units),
            Supply::Upstream(u) if u.idle >= units => {
                u.idle -= units;
                u.on_lease += units;
                true
            }
            Supply::Upstream(_) => false,
            Supply::Window(w) if w.free >= units => {
                w.free -= units;
                true
            }
            Supply::Window(_) => false,
        };
        assert!(taken, "put_on_lease beyond available credit");
        self.outstanding += units;
        self.stats.granted += units;
    }

    /// Units an exact decision may take at `now`: what [`available`](Self::available)
    /// offers, without a window's tail cut off.
    pub fn decidable(&mut self, now: Nanos) -> u64 {
        let free = self.available(now);
        match &self.supply {
            Supply::Window(w) => w.decidable(now),
            _ => free,
        }
    }

    /// Spends `units` of free credit at once (an exact decision). The caller checked
    /// [`decidable`](Self::decidable) at this time.
    pub fn spend_now(&mut self, units: u64) {
        let taken = match &mut self.supply {
            Supply::Bucket(b) => b.take_exact(units),
            Supply::Window(w) if w.free >= units => {
                w.free -= units;
                true
            }
            Supply::Window(_) | Supply::Upstream(_) => false,
        };
        assert!(taken, "spend_now beyond decidable credit");
        self.stats.used += units;
    }

    /// Gives back `units` an exact decision at `decided_at` spent, if they can still be
    /// spent: a window's units only within that window, a bucket's up to its burst.
    /// Returns the units given back; the rest stay counted as used.
    pub fn unspend(&mut self, units: u64, decided_at: Nanos, now: Nanos) -> u64 {
        self.available(now);
        let units = units.min(self.stats.used);
        let outstanding = self.outstanding;
        let back = match &mut self.supply {
            Supply::Bucket(b) => {
                let cap = b.burst().saturating_sub(outstanding);
                let room = cap.saturating_sub(b.tokens());
                let back = units.min(room);
                b.give_back(back, cap);
                back
            }
            Supply::Window(w) if w.holds(decided_at) => {
                let room = w
                    .spec
                    .limit()
                    .saturating_sub(w.free.saturating_add(outstanding));
                let back = units.min(room);
                w.free += back;
                back
            }
            Supply::Window(_) | Supply::Upstream(_) => 0,
        };
        self.stats.used -= back;
        back
    }

    /// Holders reported `units` more spent of a lease carved from `parent`. Refills first:
    /// credit earned so far was earned under the cap that held while those units were
    /// still outstanding.
    pub fn mark_used(&mut self, units: u64, origin: Origin, now: Nanos) {
        self.available(now);
        self.outstanding -= units;
        self.stats.used += units;
        if let Some(u) = self.current_upstream(origin.parent) {
            u.on_lease -= units;
            u.consumed += units;
        }
    }

    /// Holders handed back `units` they will never spend. Credit carved from an upstream
    /// lease that has since closed was settled with that lease and is dropped here; window
    /// credit handed back after its window ended lapses with it.
    pub fn reclaim(&mut self, units: u64, origin: Origin, now: Nanos) {
        self.available(now);
        self.outstanding -= units;
        self.stats.reclaimed += units;
        let outstanding = self.outstanding;
        let dropped = match &mut self.supply {
            Supply::Bucket(b) => b.give_back(units, b.burst().saturating_sub(outstanding)),
            Supply::Upstream(u) if u.lease_id.is_some() && u.lease_id == origin.parent => {
                u.on_lease -= units;
                u.idle += units;
                0
            }
            Supply::Upstream(_) => units,
            Supply::Window(w) if w.holds(origin.issued_at) => {
                w.free += units;
                0
            }
            Supply::Window(_) => {
                self.stats.lapsed += units;
                0
            }
        };
        self.stats.dropped += dropped;
    }

    /// Writes off `units` of a lease that expired before its holder accounted for them.
    pub fn strand(&mut self, units: u64, origin: Origin, now: Nanos) {
        self.available(now);
        self.outstanding -= units;
        self.stats.stranded += units;
        if let Some(u) = self.current_upstream(origin.parent) {
            u.on_lease -= units;
            u.consumed += units;
        }
    }

    fn current_upstream(&mut self, parent: Option<LeaseId>) -> Option<&mut UpstreamSupply> {
        match &mut self.supply {
            Supply::Upstream(u) if u.lease_id.is_some() && u.lease_id == parent => Some(u),
            _ => None,
        }
    }

    /// Credit this key can spread over its holders per refresh horizon, for fair share: a
    /// root bucket's production per horizon, a delegated key's whole pool (free plus on
    /// lease), or what is left of the current window plus what is on lease.
    pub fn capacity(&self, horizon_ns: u64) -> u64 {
        match &self.supply {
            Supply::Bucket(b) => b.rate().units_in(horizon_ns).max(1),
            Supply::Upstream(u) => u.idle.saturating_add(self.outstanding),
            Supply::Window(w) => w.free.saturating_add(self.outstanding).max(1),
        }
    }

    /// Largest credit this key could ever hold at once (the reserve is a share of it).
    pub fn ceiling(&self) -> u64 {
        match &self.supply {
            Supply::Bucket(b) => b.burst(),
            Supply::Upstream(u) => u.idle + self.outstanding,
            Supply::Window(w) => w.spec.limit(),
        }
    }

    /// Free credit as last computed, without refilling.
    pub fn free_now(&self) -> u64 {
        match &self.supply {
            Supply::Bucket(b) => b.tokens(),
            Supply::Upstream(u) => u.idle,
            Supply::Window(w) => w.free,
        }
    }

    /// Checks that every unit this key ever had is accounted for exactly once.
    pub fn conserved(&self) -> bool {
        let s = &self.stats;
        let came = s.initial as u128 + s.produced as u128 + s.received as u128;
        let went = self.free_now() as u128
            + self.outstanding as u128
            + s.used as u128
            + s.stranded as u128
            + s.dropped as u128
            + s.returned_upstream as u128
            + s.lost_upstream as u128
            + s.lapsed as u128;
        came == went
    }

    /// True when dropping this key loses nothing: no lease out, nothing owed upstream, and
    /// (for a root key) a full bucket, so re-creating it full later mints nothing.
    pub fn is_idle(&mut self, now: Nanos, idle_after_ns: u64) -> bool {
        if self.leases > 0 || self.outstanding > 0 {
            return false;
        }
        let quiet = self
            .holders
            .values()
            .all(|h| now.saturating_since(h.last_seen) >= idle_after_ns);
        if !quiet {
            return false;
        }
        let free = self.available(now);
        match &self.supply {
            Supply::Bucket(b) => free >= b.burst(),
            Supply::Upstream(u) => u.lease_id.is_none() && u.idle == 0,
            // Consumption of the current window (or of the previous one, for a sliding
            // window) still counts: forgetting it would hand the window out again.
            Supply::Window(w) => w.untouched(),
        }
    }
}
