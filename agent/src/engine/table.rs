//! Per-key state in a sharded, bounded table (P4).
//!
//! Keys are attacker-influenced, so the table has a hard cap (`keys_max`, split evenly over
//! the shards) and a keyed hash (seeded per table) so that nobody can aim many keys at one
//! shard. A full shard first drops the entries it may forget (see [`super::forget`]); if
//! there are none the caller is told, and spends from the policy's overflow key instead of
//! growing the table. A shard that found nothing to drop looks again only once one of its
//! entries may have come to rest, so a table full of live keys costs a lookup per new key,
//! not a scan.
//!
//! The caller hashes a key once; the hash picks the shard and the bucket, and entries keep
//! their key and hash so a lookup compares in place. Shards are read under a
//! [`ReadStripedLock`], whose readers write only their own thread's cache line, and the
//! hot path uses an entry while inside the read section instead of taking a reference
//! count; the entry itself is updated through atomics (leased credit, in-flight counters)
//! or its own small lock (local algorithms), so keys in one shard do not serialise each
//! other.

use super::local::{LocalLimiter, LocalTime};
use super::paced::Pacer;
use super::readlock::ReadStripedLock;
use super::spin::SpinLock;
use compact_str::CompactString;
use hashbrown::HashTable;
use leasehold_common::algo::TokenBucket;
use leasehold_common::time::Nanos;
use parking_lot::Mutex;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::credit::CreditSlot;

/// `acquiring_since_ns` before the engine has seen the slot wait for a lease.
pub(crate) const NOT_ACQUIRING: u64 = u64::MAX;

// A leased key's state, pacer included, fits in the space a local limiter takes: shaping
// leased keys add nothing to the size of every other key's entry.
const _: () = assert!(
    std::mem::size_of::<(Arc<CreditSlot>, AtomicU64, Option<Box<Pacer>>)>()
        <= std::mem::size_of::<SpinLock<LocalLimiter>>()
);

/// The top bit of [`Entry::generation_word`]: set once the table no longer holds the
/// entry. Generations count policy versions from 0 and never reach it.
const REMOVED: u64 = 1 << 63;

/// One key's state.
#[derive(Debug)]
pub struct Entry {
    /// The canonical key, and its hash under the table's seed. Keys of up to 24 bytes are
    /// kept inline, so most keys cost no allocation of their own.
    key: CompactString,
    hash: u64,
    /// Generation of the compiled policy the state was built for (a changed policy gets
    /// fresh state on its next use), with [`REMOVED`] set once the table no longer holds
    /// this entry, so that threads caching it stop using it. One word for both keeps
    /// the entry, and so every key, 8 bytes smaller, and checks both with one load.
    generation_word: AtomicU64,
    last_used_ns: AtomicU64,
    pub(crate) state: EntryState,
    /// The local emergency bucket used while the policy is restricted; made on first need,
    /// and boxed so that the keys that never need it (nearly all) spend a pointer on it.
    pub(crate) emergency: Mutex<Option<Box<TokenBucket>>>,
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
        /// The schedule of departures of a shaping policy's key; `None` for every other
        /// policy, whose keys spend nothing on it (see the size check above `Entry`).
        pacer: Option<Box<Pacer>>,
    },
    /// Decided per request by the allocator: only the entry (and its emergency bucket).
    Exact,
    /// A limiter of this process, under a lock whose sections are a check or a refund.
    Local(SpinLock<LocalLimiter>),
    /// Units in flight against a concurrency limit.
    InFlight { count: Arc<AtomicU64>, max: u64 },
}

impl Entry {
    pub(crate) fn new(
        key: CompactString,
        hash: u64,
        generation: u64,
        state: EntryState,
        now: Nanos,
    ) -> Entry {
        Entry {
            key,
            hash,
            generation_word: AtomicU64::new(generation & !REMOVED),
            last_used_ns: AtomicU64::new(now.0),
            state,
            emergency: Mutex::new(None),
        }
    }

    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    /// Whether threads may keep this entry to use again without the table's lock: not
    /// for concurrency counts, whose eviction (when nothing is in flight) must not race
    /// a new acquisition.
    pub(crate) fn cacheable(&self) -> bool {
        !matches!(self.state, EntryState::InFlight { .. })
    }

    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Generation of the compiled policy the state was built for.
    pub(crate) fn generation(&self) -> u64 {
        self.generation_word.load(Ordering::Relaxed) & !REMOVED
    }

    /// Whether this is still the table's entry for `key` under `generation`.
    #[inline]
    pub(crate) fn is_current(&self, key: &str, hash: u64, generation: u64) -> bool {
        self.hash == hash && self.is_live(generation) && super::bytes::same(&self.key, key)
    }

    /// Whether this is still in the table, built for `generation`.
    #[inline]
    pub(crate) fn is_live(&self, generation: u64) -> bool {
        // A removed entry's word has the top bit set, which no generation has.
        self.generation_word.load(Ordering::Acquire) == generation
    }

    /// Marks the entry as no longer in the table. Unless its state moves on to a
    /// replacement entry (`carried`), a leased key's slot is detached too, so that the
    /// lease manager hands its lease back.
    fn mark_removed(&self, carried: bool) {
        self.generation_word.fetch_or(REMOVED, Ordering::Release);
        if let (EntryState::Leased { slot, .. }, false) = (&self.state, carried) {
            slot.detach();
        }
    }

    /// Records a use at `now` unless the recorded one is less than `slack_ns` behind, so
    /// a hot key does not rewrite a line other threads read on every request.
    #[inline]
    pub(crate) fn touch(&self, now: Nanos, slack_ns: u64) {
        let last = self.last_used_ns.load(Ordering::Relaxed);
        if now.0 > last && now.0 - last > slack_ns {
            self.last_used_ns.store(now.0, Ordering::Relaxed);
        }
    }

    /// The recorded last use (up to the table's `touch_ns` behind the real one).
    pub(crate) fn last_used(&self) -> Nanos {
        Nanos(self.last_used_ns.load(Ordering::Relaxed))
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

/// The table was full and had no entry it may forget.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableFull;

/// Keys come from callers (an attacker may choose them), so the hash is seeded per table;
/// foldhash's quality variant costs a fraction of SipHash on the hot path.
type KeyHasher = foldhash::quality::RandomState;
type Shard = ReadStripedLock<ShardMap>;

struct ShardMap {
    map: HashTable<Arc<Entry>>,
    /// While full, the shard is not scanned for entries to drop before this monotonic
    /// time: the earliest any entry it kept may come to rest.
    next_scan_ns: u64,
}

/// A full shard of live keys is scanned at most this often, however soon its entries
/// come to rest: a scan visits every entry under the shard's write lock.
const SCAN_GAP_NS: u64 = 100_000_000;

pub(crate) struct KeyTable {
    shards: Box<[Shard]>,
    shard_cap: usize,
    idle_ns: u64,
    /// `last_used_ns` is rewritten only once it is this far behind.
    touch_ns: u64,
    hasher: KeyHasher,
    len: AtomicUsize,
    evictions: AtomicU64,
}

/// Longest a key's recorded last use lags its real last use: idle eviction may come this
/// much early, which is nothing next to `key_idle_ns`, and a hot key stops rewriting a
/// shared line on every request.
const TOUCH_NS_MAX: u64 = 1_000_000;

impl KeyTable {
    /// A table of at most `keys_max` keys over about `shards` shards; entries whose state
    /// lives elsewhere may be dropped once unused for `idle_ns`. Readers are counted in `stripes` stripes.
    pub(crate) fn new(keys_max: usize, shards: usize, idle_ns: u64, stripes: usize) -> KeyTable {
        let keys_max = keys_max.max(1);
        let count = shards.clamp(1, keys_max);
        KeyTable {
            shards: (0..count)
                .map(|_| {
                    let map = ShardMap {
                        map: HashTable::new(),
                        next_scan_ns: 0,
                    };
                    ReadStripedLock::new(map, stripes)
                })
                .collect(),
            shard_cap: keys_max / count,
            idle_ns,
            touch_ns: (idle_ns / 64).min(TOUCH_NS_MAX),
            hasher: KeyHasher::default(),
            len: AtomicUsize::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The hash every other method takes with `key`.
    #[inline]
    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        // The high half picks the shard; the bucket and tag bits come from elsewhere.
        let i = ((hash >> 32) * self.shards.len() as u64) >> 32;
        &self.shards[i as usize]
    }

    /// Runs `f` on the entry for `key` if it exists and was built for `generation`, inside
    /// the shard's read section (so `f` must not write to the table).
    #[inline]
    pub(crate) fn with<R>(
        &self,
        key: &str,
        hash: u64,
        generation: u64,
        f: impl FnOnce(&Arc<Entry>) -> R,
    ) -> Option<R> {
        self.shard(hash).read(|shard| {
            shard
                .map
                .find(hash, |e| e.hash == hash && super::bytes::same(&e.key, key))
                .filter(|e| e.generation() == generation)
                .map(f)
        })
    }

    /// The entry for `key` built for `generation`, made by `make` (given the stale entry,
    /// if any) when missing. Returns whether it was made here.
    pub(crate) fn get_or_insert(
        &self,
        key: &str,
        hash: u64,
        generation: u64,
        at: LocalTime,
        make: impl FnOnce(Option<&Entry>) -> EntryState,
    ) -> Result<(Arc<Entry>, bool), TableFull> {
        let now = at.mono;
        self.shard(hash).write(|shard| {
            let eq = |e: &Arc<Entry>| e.hash == hash && *e.key == *key;
            let stale = match shard.map.find(hash, eq) {
                Some(e) if e.generation() == generation => return Ok((Arc::clone(e), false)),
                Some(e) => Some(Arc::clone(e)),
                None => None,
            };
            if stale.is_none() && shard.map.len() >= self.shard_cap {
                if now.0 >= shard.next_scan_ns {
                    self.drop_at_rest(shard, at);
                }
                if shard.map.len() >= self.shard_cap {
                    return Err(TableFull);
                }
            }
            let map = &mut shard.map;
            let state = make(stale.as_deref());
            let entry = Arc::new(Entry::new(key.into(), hash, generation, state, now));
            match map.find_mut(hash, eq) {
                Some(slot) => {
                    slot.mark_removed(true);
                    *slot = Arc::clone(&entry);
                }
                None => {
                    map.insert_unique(hash, Arc::clone(&entry), |e| e.hash);
                    self.len.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok((entry, true))
        })
    }

    /// Drops the shard's entries that may go at `at`, and notes when the next may.
    fn drop_at_rest(&self, shard: &mut ShardMap, at: LocalTime) {
        let before = shard.map.len();
        let mut next = u64::MAX;
        shard.map.retain(|e| {
            let droppable_at = e.droppable_at(at, self.idle_ns);
            let keep = droppable_at > at.mono;
            if keep {
                next = next.min(droppable_at.0);
            } else {
                e.mark_removed(false);
            }
            keep
        });
        shard.next_scan_ns = next.max(at.mono.0.saturating_add(SCAN_GAP_NS));
        self.note_removed(before - shard.map.len());
    }

    fn note_removed(&self, removed: usize) {
        self.len.fetch_sub(removed, Ordering::Relaxed);
        self.evictions.fetch_add(removed as u64, Ordering::Relaxed);
    }

    /// Drops entries that may go at `at` and entries whose policy generation is no
    /// longer live. Returns how many were dropped.
    pub(crate) fn sweep(&self, at: LocalTime, live: impl Fn(u64) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            removed += shard.write(|shard| {
                let map = &mut shard.map;
                let before = map.len();
                // State of a removed policy goes even with units in flight: their guards
                // hold the entry, and no new request can reach it.
                map.retain(|e| {
                    let at_rest = e.droppable_at(at, self.idle_ns) <= at.mono;
                    let keep = live(e.generation()) && !at_rest;
                    if !keep {
                        e.mark_removed(false);
                    }
                    keep
                });
                before - map.len()
            });
        }
        self.note_removed(removed);
        removed
    }

    /// Calls `f` on every entry, one shard at a time inside its read section.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Entry)) {
        for shard in self.shards.iter() {
            shard.read(|shard| shard.map.iter().for_each(|e| f(e)));
        }
    }

    /// How far behind a key's recorded last use may lag.
    pub(crate) fn touch_ns(&self) -> u64 {
        self.touch_ns
    }

    /// Keys held now.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Entries dropped so far (at rest, idle with their state elsewhere, or of a removed
    /// policy).
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// The most keys the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    /// Every key held costs an entry: a million keys per agent are meant to fit in about
    /// 200 MB (docs/benchmarks.md measures the whole per key).
    #[test]
    fn an_entry_stays_small() {
        assert!(std::mem::size_of::<super::Entry>() <= 152);
    }
}
