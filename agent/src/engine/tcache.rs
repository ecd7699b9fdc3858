//! Per-thread caches of the hot path: the rule set in force and recently used keys.
//!
//! Loading the shared rule set and entering a key-table shard each write a line that other
//! threads also write (a reference count or a reader count), and an uncontended atomic
//! read-modify-write still costs as much as the rest of a decision. A thread that decides
//! for the same engine again reuses what it loaded last time after two plain checks: the
//! engine's rule-set stamp is unchanged, and the cached key entry is still the one in the
//! table (same key and policy generation, not removed). Only a miss takes the shared path
//! and refreshes the cache.
//!
//! A removed entry is never used again from a cache, but a decision that found it just
//! before its removal may finish on it. For leased keys that is exact anyway: their state
//! is the credit slot, whose epoch and close account for every spend whichever entry it
//! went through. For local limiters only idle keys are removed, and a removed key's next
//! request starts a fresh limiter either way. Concurrency counts are not cached: one is
//! removed when nothing is in flight, and an acquisition racing that removal would be
//! counted where no later request looks; they always go through the table's lock.
//!
//! One thread caches for one engine at a time; deciding for another engine clears it. What
//! a thread holds (one rule set, at most 128 entries) stays alive until it is replaced, the
//! thread decides for another engine, or the thread exits.

use super::decision::DIMENSIONS_LIMIT;
use super::rules::{PolicyHints, RuleSet};
use super::table::Entry;
use leasehold_common::key::{KeyBuilder, KEY_LEN_MAX_DEFAULT};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Cached key entries per thread (direct-mapped by key hash).
pub(crate) const KEYS_CACHED: usize = 64;

/// Unique per engine, so a thread's cache never serves one engine's state to another.
static NEXT_ENGINE_UID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_engine_uid() -> u64 {
    NEXT_ENGINE_UID.fetch_add(1, Ordering::Relaxed)
}

/// Stamps of rule sets, unique across every engine of the process (never zero, which a
/// fresh thread cache holds), so that one comparison tells a thread whether its cached
/// set is the engine's current one.
static NEXT_RULES_STAMP: AtomicU64 = AtomicU64::new(1);

/// A stamp no rule set has had before.
pub(crate) fn next_rules_stamp() -> u64 {
    NEXT_RULES_STAMP.fetch_add(1, Ordering::Relaxed)
}

/// Key buffers of one thread: the fast path's and the general builder's. Building a key
/// for an existing entry allocates nothing once they have grown to the longest key.
pub(crate) struct KeyBuffers {
    pub(crate) fast: String,
    pub(crate) builder: KeyBuilder,
}

impl KeyBuffers {
    pub(crate) fn new() -> Self {
        KeyBuffers {
            fast: String::with_capacity(KEY_LEN_MAX_DEFAULT),
            builder: KeyBuilder::new(),
        }
    }
}

/// Recently used entries of one engine (leased and local limiters): those of requests
/// whose values are plain by a hash of the values (found without building the key), the
/// others by the key's hash.
///
/// An entry the cache gives or is given during a request of several dimensions stays alive
/// until the request ends, even if a later dimension's entry takes its place: the charges
/// kept to undo refer to their entries without counts of their own (`undo::Found`). A
/// request of one dimension keeps no such charge.
pub(crate) struct EntryCache {
    /// Arrays of a fixed size, so that an index masked to it needs no bounds check.
    entries: Box<[Option<Arc<Entry>>; KEYS_CACHED]>,
    plain: Box<[Option<Arc<Entry>>; KEYS_CACHED]>,
    /// Entries displaced lately, kept from the start of the current request of several
    /// dimensions ([`hold_displaced`](Self::hold_displaced)) to its end. At most
    /// [`DIMENSIONS_LIMIT`]: a dimension puts at most one entry, and once full the list is
    /// emptied before the next is added, which no request of several dimensions reaches.
    displaced: Vec<Arc<Entry>>,
}

impl EntryCache {
    fn new() -> Self {
        EntryCache {
            entries: Box::new(std::array::from_fn(|_| None)),
            plain: Box::new(std::array::from_fn(|_| None)),
            displaced: Vec::with_capacity(DIMENSIONS_LIMIT),
        }
    }

    /// A request of several dimensions starts: entries displaced from here until it ends
    /// stay alive until then; those displaced before may go.
    #[inline(always)]
    pub(crate) fn hold_displaced(&mut self) {
        if !self.displaced.is_empty() {
            self.displaced.clear();
        }
    }

    /// The cached entry for plain values hashing to `values_hash` if it is still the
    /// table's entry for `generation`; the caller checks that its key is the values'.
    #[inline(always)]
    pub(crate) fn get_plain(&self, values_hash: u64, generation: u64) -> Option<&Arc<Entry>> {
        match &self.plain[Self::index(values_hash)] {
            Some(e) if e.is_live(generation) => Some(e),
            _ => None,
        }
    }

    /// Remembers `entry` for requests whose plain values hash to `values_hash`.
    pub(crate) fn put_plain(&mut self, values_hash: u64, entry: &Arc<Entry>) {
        let slot = &mut self.plain[Self::index(values_hash)];
        remember(slot, entry, &mut self.displaced);
    }

    #[inline]
    fn index(hash: u64) -> usize {
        // The low bits pick the table's bucket; these pick the cache line independently.
        (hash >> 20) as usize & (KEYS_CACHED - 1)
    }

    /// The cached entry for `key` if it is still the table's entry for `generation`.
    #[inline]
    pub(crate) fn get(&self, key: &str, hash: u64, generation: u64) -> Option<&Arc<Entry>> {
        self.entries[Self::index(hash)]
            .as_ref()
            .filter(|e| e.is_current(key, hash, generation))
    }

    /// Remembers `entry` (just found or made in the table, and cacheable).
    pub(crate) fn put(&mut self, entry: &Arc<Entry>) {
        let slot = &mut self.entries[Self::index(entry.hash())];
        remember(slot, entry, &mut self.displaced);
    }

    /// Forgets every entry; called only as a request starts (no charge refers to any).
    fn clear(&mut self) {
        self.entries.iter_mut().for_each(|e| *e = None);
        self.plain.iter_mut().for_each(|e| *e = None);
        self.displaced.clear();
    }
}

fn remember(slot: &mut Option<Arc<Entry>>, entry: &Arc<Entry>, displaced: &mut Vec<Arc<Entry>>) {
    if !slot.as_ref().is_some_and(|e| Arc::ptr_eq(e, entry)) {
        if let Some(old) = slot.replace(Arc::clone(entry)) {
            if displaced.len() >= DIMENSIONS_LIMIT {
                displaced.clear();
            }
            displaced.push(old);
        }
    }
}

/// The parts of a thread's cache the dimension checks write.
pub(crate) struct Scratch<'a> {
    pub(crate) keys: &'a mut KeyBuffers,
    pub(crate) entries: &'a mut EntryCache,
    /// Policy lookups of the cached rule set.
    pub(crate) hints: &'a mut PolicyHints,
}

impl Scratch<'_> {
    /// The same scratch for one more dimension's check.
    pub(crate) fn reborrow(&mut self) -> Scratch<'_> {
        Scratch {
            keys: self.keys,
            entries: self.entries,
            hints: self.hints,
        }
    }
}

/// What one thread keeps between decisions.
pub(crate) struct ThreadCache {
    engine_uid: u64,
    /// The stamp of `rules` (0, which no set has, until a set is loaded).
    rules_stamp: u64,
    /// Empty until the first request loads an engine's set.
    rules: Arc<RuleSet>,
    hints: PolicyHints,
    keys: KeyBuffers,
    entries: EntryCache,
}

impl ThreadCache {
    pub(crate) fn new() -> Self {
        ThreadCache {
            engine_uid: 0,
            rules_stamp: 0,
            rules: Arc::default(),
            hints: PolicyHints::default(),
            keys: KeyBuffers::new(),
            entries: EntryCache::new(),
        }
    }

    /// The rule set of engine `uid` stamped `stamp`, loading it with `load` when this
    /// thread last saw another set. Returns it with the key state. Called once as each
    /// request starts.
    #[inline]
    pub(crate) fn rules(
        &mut self,
        uid: u64,
        stamp: u64,
        load: impl FnOnce() -> Arc<RuleSet>,
    ) -> (&RuleSet, Scratch<'_>) {
        // Stamps are unique across engines: a match is this engine's current set.
        if self.rules_stamp != stamp {
            self.refresh(uid, stamp, load);
        }
        let rules = &*self.rules;
        let scratch = Scratch {
            keys: &mut self.keys,
            entries: &mut self.entries,
            hints: &mut self.hints,
        };
        (rules, scratch)
    }

    #[cold]
    fn refresh(&mut self, uid: u64, stamp: u64, load: impl FnOnce() -> Arc<RuleSet>) {
        if self.engine_uid != uid {
            self.entries.clear();
            self.engine_uid = uid;
        }
        self.rules_stamp = stamp;
        self.rules = load();
        self.hints = PolicyHints::default();
    }
}

thread_local! {
    static CACHE: RefCell<ThreadCache> = RefCell::new(ThreadCache::new());
}

/// Runs `f` with this thread's cache, or with a fresh one when it cannot be had (the
/// thread is exiting, or a decision is already running on this thread further up).
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&mut ThreadCache) -> R) -> R {
    let mut f = Some(f);
    let done = CACHE.try_with(|c| {
        c.try_borrow_mut()
            .ok()
            .map(|mut c| (f.take().expect("called once"))(&mut c))
    });
    match done {
        Ok(Some(r)) => r,
        _ => fallback(f.expect("not called")),
    }
}

#[cold]
fn fallback<R>(f: impl FnOnce(&mut ThreadCache) -> R) -> R {
    f(&mut ThreadCache::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::table::EntryState;
    use leasehold_common::time::Nanos;

    fn entry(hash: u64) -> Arc<Entry> {
        let state = EntryState::InFlight {
            max: 1,
            count: Default::default(),
        };
        Arc::new(Entry::new("k".into(), hash, 1, state, Nanos(0)))
    }

    /// The hash of the `n`th entry sharing the cache place of `place`.
    fn sharing(place: u64, n: u64) -> u64 {
        (place + n * KEYS_CACHED as u64) << 20
    }

    /// The charges a request of several dimensions keeps refer to the entries the cache
    /// gave them without counts of their own: an entry displaced by a later dimension of
    /// the same request must stay alive until the request ends.
    #[test]
    fn displaced_entries_live_until_the_request_ends() {
        let mut cache = EntryCache::new();
        let (first, second) = (entry(sharing(7, 0)), entry(sharing(7, 1)));
        cache.hold_displaced();
        cache.put(&first);
        cache.put(&first);
        cache.put(&second);
        cache.put_plain(3 << 20, &first);
        cache.put_plain(3 << 20, &second);
        assert_eq!(Arc::strong_count(&first), 3, "displaced twice, kept twice");
        cache.hold_displaced();
        assert_eq!(
            Arc::strong_count(&first),
            1,
            "let go as the next one starts"
        );
        assert_eq!(Arc::strong_count(&second), 3, "still cached in both places");
        cache.clear();
        assert_eq!(Arc::strong_count(&second), 1);
    }

    /// Requests of one dimension keep no such charges: what they displace is let go in
    /// time, but never during a request of several dimensions, which puts at most one
    /// entry per dimension.
    #[test]
    fn displaced_entries_are_bounded() {
        let mut cache = EntryCache::new();
        for n in 0..3 * DIMENSIONS_LIMIT as u64 {
            cache.put(&entry(sharing(5, n)));
            assert!(cache.displaced.len() <= DIMENSIONS_LIMIT);
        }
        cache.hold_displaced();
        let held: Vec<_> = (0..DIMENSIONS_LIMIT as u64)
            .map(|n| entry(sharing(5, 100 + n)))
            .collect();
        for e in &held {
            cache.put(e);
        }
        // Every dimension's entry but the last (still cached) was displaced and is kept.
        for e in &held[..DIMENSIONS_LIMIT - 1] {
            assert_eq!(Arc::strong_count(e), 2);
        }
    }
}
