//! Per-thread caches of the hot path: the rule set in force and recently used keys.
//!
//! Loading the shared rule set and entering a key-table shard each write a line that other
//! threads also write (a reference count or a reader count), and an uncontended atomic
//! read-modify-write still costs as much as the rest of a decision. A thread that decides
//! for the same engine again reuses what it loaded last time after two plain checks: the
//! engine's rule-set version is unchanged, and the cached key entry is still the one in the
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
pub(crate) struct EntryCache {
    entries: Box<[Option<Arc<Entry>>]>,
    plain: Box<[Option<Arc<Entry>>]>,
}

impl EntryCache {
    fn new() -> Self {
        EntryCache {
            entries: vec![None; KEYS_CACHED].into_boxed_slice(),
            plain: vec![None; KEYS_CACHED].into_boxed_slice(),
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
        remember(&mut self.plain[Self::index(values_hash)], entry);
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
        remember(&mut self.entries[Self::index(entry.hash())], entry);
    }

    fn clear(&mut self) {
        self.entries.iter_mut().for_each(|e| *e = None);
        self.plain.iter_mut().for_each(|e| *e = None);
    }
}

fn remember(slot: &mut Option<Arc<Entry>>, entry: &Arc<Entry>) {
    if !slot.as_ref().is_some_and(|e| Arc::ptr_eq(e, entry)) {
        *slot = Some(Arc::clone(entry));
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
    rules_version: u64,
    rules: Option<Arc<RuleSet>>,
    hints: PolicyHints,
    keys: KeyBuffers,
    entries: EntryCache,
}

impl ThreadCache {
    pub(crate) fn new() -> Self {
        ThreadCache {
            engine_uid: 0,
            rules_version: 0,
            rules: None,
            hints: PolicyHints::default(),
            keys: KeyBuffers::new(),
            entries: EntryCache::new(),
        }
    }

    /// The rule set of engine `uid` at `version`, loading it with `load` when this thread
    /// last saw another engine or another version. Returns it with the key state.
    #[inline]
    pub(crate) fn rules(
        &mut self,
        uid: u64,
        version: u64,
        load: impl FnOnce() -> Arc<RuleSet>,
    ) -> (&RuleSet, Scratch<'_>) {
        if self.engine_uid != uid || self.rules_version != version || self.rules.is_none() {
            self.refresh(uid, version, load);
        }
        let rules = self.rules.as_deref().expect("loaded above");
        let scratch = Scratch {
            keys: &mut self.keys,
            entries: &mut self.entries,
            hints: &mut self.hints,
        };
        (rules, scratch)
    }

    #[cold]
    fn refresh(&mut self, uid: u64, version: u64, load: impl FnOnce() -> Arc<RuleSet>) {
        if self.engine_uid != uid {
            self.entries.clear();
            self.engine_uid = uid;
        }
        self.rules_version = version;
        self.rules = Some(load());
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
