//! Per-key state in a sharded, bounded map (P4).
//!
//! Keys are attacker-influenced, so the table has a hard cap (`keys_max`, split evenly over
//! the shards) and a keyed hash (SipHash with a random key) so that nobody can aim many keys
//! at one shard. A full shard first drops its idle entries; if none are idle the caller is
//! told, and spends from the policy's overflow key instead of growing the table.
//!
//! Readers take a shard's read lock only to clone the entry's `Arc`; the entry itself is
//! updated through atomics (leased credit, in-flight counters) or its own small lock (local
//! algorithms), so keys in one shard do not serialise each other.

use super::local::LocalLimiter;
use leasehold_common::algo::TokenBucket;
use leasehold_common::time::Nanos;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::credit::CreditSlot;

/// `acquiring_since_ns` before the engine has seen the slot wait for a lease.
pub(crate) const NOT_ACQUIRING: u64 = u64::MAX;

/// One key's state.
#[derive(Debug)]
pub struct Entry {
    /// Generation of the compiled policy the state was built for; a changed policy gets
    /// fresh state on its next use.
    pub(crate) generation: u64,
    last_used_ns: AtomicU64,
    pub(crate) state: EntryState,
    /// The local emergency bucket used while the policy is restricted; made on first need.
    pub(crate) emergency: Mutex<Option<TokenBucket>>,
}

#[derive(Debug)]
pub(crate) enum EntryState {
    /// Credit leased from an allocator, spent lock-free; the lease manager holds the same
    /// slot.
    Leased {
        slot: Arc<CreditSlot>,
        /// When this engine asked for the key's lease (monotonic ns), to bound how long a
        /// missing first lease is waited for; [`NOT_ACQUIRING`] before that.
        acquiring_since_ns: AtomicU64,
    },
    Local(Mutex<LocalLimiter>),
    /// Units in flight against a concurrency limit.
    InFlight {
        count: Arc<AtomicU64>,
        max: u64,
    },
}

impl Entry {
    pub(crate) fn new(generation: u64, state: EntryState, now: Nanos) -> Entry {
        Entry {
            generation,
            last_used_ns: AtomicU64::new(now.0),
            state,
            emergency: Mutex::new(None),
        }
    }

    pub(crate) fn touch(&self, now: Nanos) {
        // Skips the store when nothing changed, so hot keys do not bounce the line.
        if self.last_used_ns.load(Ordering::Relaxed) != now.0 {
            self.last_used_ns.store(now.0, Ordering::Relaxed);
        }
    }

    fn idle_since(&self, now: Nanos, idle_ns: u64) -> bool {
        now.0
            .saturating_sub(self.last_used_ns.load(Ordering::Relaxed))
            >= idle_ns
    }

    /// Whether the entry may be dropped although idle: units still in flight must be
    /// released into this entry, so it stays.
    fn evictable(&self) -> bool {
        match &self.state {
            EntryState::InFlight { count, .. } => count.load(Ordering::Acquire) == 0,
            _ => true,
        }
    }

    /// Takes `units` against a concurrency limit if they fit; returns the count after.
    pub(crate) fn acquire_in_flight(&self, units: u64) -> Result<u64, u64> {
        let EntryState::InFlight { count, max } = &self.state else {
            return Err(0);
        };
        let mut cur = count.load(Ordering::Acquire);
        loop {
            let next = cur.checked_add(units).filter(|n| n <= max).ok_or(cur)?;
            match count.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(next),
                Err(actual) => cur = actual,
            }
        }
    }

    pub(crate) fn release_in_flight(&self, units: u64) {
        if let EntryState::InFlight { count, .. } = &self.state {
            // Saturating: a double release must not wrap into a huge count.
            let _ = count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_sub(units))
            });
        }
    }
}

/// The table was full and had no idle entry to drop.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableFull;

/// Keys come from callers (an attacker may choose them), so the hash is seeded per table;
/// foldhash's quality variant costs a fraction of SipHash on the hot path.
type KeyHasher = foldhash::quality::RandomState;
type Shard = RwLock<HashMap<Box<str>, Arc<Entry>, KeyHasher>>;

pub(crate) struct KeyTable {
    shards: Box<[Shard]>,
    shard_cap: usize,
    idle_ns: u64,
    hasher: KeyHasher,
    len: AtomicUsize,
    evictions: AtomicU64,
}

impl KeyTable {
    /// A table of at most `keys_max` keys over about `shards` shards; entries unused for
    /// `idle_ns` may be dropped.
    pub(crate) fn new(keys_max: usize, shards: usize, idle_ns: u64) -> KeyTable {
        let keys_max = keys_max.max(1);
        let count = shards.clamp(1, keys_max);
        KeyTable {
            shards: (0..count)
                .map(|_| RwLock::new(HashMap::with_hasher(KeyHasher::default())))
                .collect(),
            shard_cap: keys_max / count,
            idle_ns,
            hasher: KeyHasher::default(),
            len: AtomicUsize::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &str) -> &Shard {
        let h = self.hasher.hash_one(key);
        &self.shards[(h % self.shards.len() as u64) as usize]
    }

    /// The entry for `key` if it exists and was built for `generation`.
    #[inline]
    pub(crate) fn get(&self, key: &str, generation: u64) -> Option<Arc<Entry>> {
        let shard = self.shard(key).read();
        shard
            .get(key)
            .filter(|e| e.generation == generation)
            .cloned()
    }

    /// The entry for `key` built for `generation`, made by `make` (given the stale entry, if
    /// any) when missing. Returns whether it was made here.
    pub(crate) fn get_or_insert(
        &self,
        key: &str,
        generation: u64,
        now: Nanos,
        make: impl FnOnce(Option<&Entry>) -> Entry,
    ) -> Result<(Arc<Entry>, bool), TableFull> {
        let mut shard = self.shard(key).write();
        let stale = match shard.get(key) {
            Some(e) if e.generation == generation => return Ok((Arc::clone(e), false)),
            Some(e) => Some(Arc::clone(e)),
            None => None,
        };
        if stale.is_none() && shard.len() >= self.shard_cap {
            self.evict_idle(&mut shard, now);
            if shard.len() >= self.shard_cap {
                return Err(TableFull);
            }
        }
        let entry = Arc::new(make(stale.as_deref()));
        if shard.insert(key.into(), Arc::clone(&entry)).is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        Ok((entry, true))
    }

    fn evict_idle(&self, shard: &mut HashMap<Box<str>, Arc<Entry>, KeyHasher>, now: Nanos) {
        let before = shard.len();
        shard.retain(|_, e| !(e.idle_since(now, self.idle_ns) && e.evictable()));
        self.note_removed(before - shard.len());
    }

    fn note_removed(&self, removed: usize) {
        self.len.fetch_sub(removed, Ordering::Relaxed);
        self.evictions.fetch_add(removed as u64, Ordering::Relaxed);
    }

    /// Drops entries idle at `now` and entries whose policy generation is no longer live.
    /// Returns how many were dropped.
    pub(crate) fn sweep(&self, now: Nanos, live: impl Fn(u64) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            let before = shard.len();
            // State of a removed policy goes even with units in flight: their guards hold
            // the entry, and no new request can reach it.
            shard.retain(|_, e| {
                let idle = e.idle_since(now, self.idle_ns) && e.evictable();
                live(e.generation) && !idle
            });
            removed += before - shard.len();
        }
        self.note_removed(removed);
        removed
    }

    /// Keys held now.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Entries dropped so far (idle or of a removed policy).
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// The most keys the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }
}
