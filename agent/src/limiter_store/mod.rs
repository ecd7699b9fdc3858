//! A standalone agent's local limiters in its state file (`--state-file`), so that a
//! restart keeps every user's window, sliding window, calendar period, token bucket and
//! GCRA schedule where it was.
//!
//! The state of keys used since the last save is written every [`SAVE_INTERVAL_MS`], and
//! that of every key once serving has stopped on SIGTERM or Ctrl-C, so an orderly restart
//! loses nothing. A `kill -9` loses what was charged since the last save: the restarted
//! agent may admit again, per key, the units it admitted in the last interval before the
//! kill (`a` below), once. So per key, across such a restart:
//!
//! * a fixed window admits at most its limit plus `a` (never more than twice its limit);
//! * a sliding window at most `limit + ⌊limit·T/W⌋ + a` in any `T`;
//! * a calendar quota at most its units plus `a` in the period;
//! * a token bucket or GCRA at most `B + ⌊r·T⌋ + a` in any `T`, where `a` is itself at most
//!   `B` plus what the rate earns in one interval.
//!
//! `concurrency` is not kept: its requests in flight ended with the process.
//! Keys whose state had no effect any more (see [`SavedState::ends_unix_ns`]) are left
//! out when saving and removed from the file when loading.

pub mod codec;

use crate::engine::{Engine, SavedLimiter, SavedState};
use codec::DecodeError;
use leasehold_common::time::{Clock, Nanos};
use std::sync::Arc;
use thiserror::Error;

/// The state file's tree of limiter records (see [`codec`]).
pub const LIMITERS_TREE: &str = "limiters";
/// The tree of the first format's fixed-window counts; moved into [`LIMITERS_TREE`] at
/// load.
pub const WINDOWS_TREE: &str = "windows";
/// Time between two saves of the states that changed.
pub const SAVE_INTERVAL_MS: u64 = 1_000;
/// A key counts as changed if used this long before the previous save: its last use is
/// recorded up to a millisecond late, and a charge may land a little after that record.
const USED_SLACK_NS: u64 = 1_000_000_000;

#[derive(Debug, Error)]
pub enum LimiterStoreError {
    #[error("state file: {0}")]
    Storage(#[from] sled::Error),
    #[error("state file: record {name:?} of tree {tree}: {source}")]
    Record {
        tree: &'static str,
        name: String,
        source: DecodeError,
    },
}

/// Limiter records: `policy id \0 key` → [`codec`] record.
#[derive(Clone, Debug)]
pub struct LimiterStore {
    tree: sled::Tree,
    /// The first format's records, read once and moved into `tree`.
    legacy: sled::Tree,
}

impl LimiterStore {
    /// The store of `tree` ([`LIMITERS_TREE`]), with `legacy` ([`WINDOWS_TREE`]) read
    /// too.
    pub fn new(tree: sled::Tree, legacy: sled::Tree) -> LimiterStore {
        LimiterStore { tree, legacy }
    }

    /// Writes `saved` in one atomic batch and flushes the file.
    pub fn save(&self, saved: &[SavedLimiter]) -> Result<(), LimiterStoreError> {
        if saved.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for s in saved {
            batch.insert(codec::name(&s.policy_id, &s.key), codec::encode(&s.state));
        }
        self.tree.apply_batch(batch)?;
        self.tree.flush()?;
        Ok(())
    }

    /// Every state recorded that still has an effect at UNIX time `unix`; the others are
    /// removed from the file. A record this agent cannot read fails the load, naming it:
    /// starting afresh instead would hand its key a fresh limit unannounced.
    pub fn load(&self, unix: Nanos) -> Result<Vec<SavedLimiter>, LimiterStoreError> {
        self.move_legacy()?;
        let mut out = Vec::new();
        let mut ended = sled::Batch::default();
        for item in self.tree.iter() {
            let (k, v) = item?;
            let record = |source| LimiterStoreError::Record {
                tree: LIMITERS_TREE,
                name: String::from_utf8_lossy(&k).into_owned(),
                source,
            };
            let (policy_id, key) = codec::split_name(&k).map_err(record)?;
            let state = codec::decode(&v).map_err(record)?;
            if state.ends_unix_ns() <= unix.0 {
                ended.remove(k);
                continue;
            }
            out.push(SavedLimiter {
                policy_id,
                key,
                state,
            });
        }
        self.tree.apply_batch(ended)?;
        Ok(out)
    }

    /// Rewrites the first format's records in this one, each unless its key already has a
    /// newer record, then empties their tree. Stopped half-way it is simply done again.
    fn move_legacy(&self) -> Result<(), LimiterStoreError> {
        if self.legacy.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for item in self.legacy.iter() {
            let (k, v) = item?;
            let state: SavedState =
                codec::decode_legacy_window(&v).map_err(|source| LimiterStoreError::Record {
                    tree: WINDOWS_TREE,
                    name: String::from_utf8_lossy(&k).into_owned(),
                    source,
                })?;
            if !self.tree.contains_key(&k)? {
                batch.insert(k, codec::encode(&state));
            }
        }
        self.tree.apply_batch(batch)?;
        self.tree.flush()?;
        self.legacy.clear()?;
        self.legacy.flush()?;
        Ok(())
    }
}

/// Puts the file's states back into `engine` (before it serves); returns how many.
pub fn restore(
    engine: &Engine,
    store: &LimiterStore,
    clock: &impl Clock,
) -> Result<usize, LimiterStoreError> {
    let now = clock.now();
    let saved = store.load(engine.unix_time(now))?;
    Ok(engine.restore_limiters(saved, now))
}

/// Saves the states of recently used keys every [`SAVE_INTERVAL_MS`] until `stop` turns
/// true, then every state still in effect. A failed save is logged and retried next time.
pub async fn run(
    engine: Arc<Engine>,
    store: LimiterStore,
    clock: impl Clock + 'static,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(SAVE_INTERVAL_MS));
    let mut since = Nanos::ZERO;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|v| *v) => break,
        }
        let now = clock.now();
        let saved = engine.saved_limiters(since, now);
        match store.save(&saved) {
            Ok(()) => since = Nanos(now.0.saturating_sub(USED_SLACK_NS)),
            Err(e) => tracing::warn!(error = %e, "limiter states not saved; retried next second"),
        }
    }
    let saved = engine.saved_limiters(Nanos::ZERO, clock.now());
    match store.save(&saved) {
        Ok(()) => tracing::info!(limiters = saved.len(), "limiter states saved"),
        Err(e) => tracing::error!(error = %e, "limiter states not saved at shutdown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(index: u64, count: u64) -> SavedState {
        SavedState::Window {
            window_ns: 10,
            index,
            count,
        }
    }

    fn saved(key: &str, state: SavedState) -> SavedLimiter {
        SavedLimiter {
            policy_id: "api".into(),
            key: key.into(),
            state,
        }
    }

    fn open(dir: &std::path::Path) -> (sled::Db, LimiterStore) {
        let db = sled::open(dir.join("state")).unwrap();
        let tree = |n| db.open_tree(n).unwrap();
        let store = LimiterStore::new(tree(LIMITERS_TREE), tree(WINDOWS_TREE));
        (db, store)
    }

    /// The first format's counts are read, moved over unless a newer record of the key
    /// exists, and gone from their tree; ended states are dropped from the file.
    #[test]
    fn first_format_records_move_over_and_ended_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let (db, store) = open(dir.path());
        let legacy = db.open_tree(WINDOWS_TREE).unwrap();
        for (key, index, count) in [("a", 5, 3), ("b", 5, 9), ("old", 1, 4)] {
            let mut v = Vec::new();
            for f in [10u64, index, count] {
                v.extend_from_slice(&f.to_be_bytes());
            }
            legacy.insert(codec::name("api", key), v).unwrap();
        }
        store.save(&[saved("b", window(5, 2))]).unwrap();
        let mut loaded = store.load(Nanos(55)).unwrap();
        loaded.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(loaded, [saved("a", window(5, 3)), saved("b", window(5, 2))]);
        assert!(legacy.is_empty());
        assert_eq!(store.tree.len(), 2, "the ended window is removed");
        assert_eq!(store.load(Nanos(60)).unwrap(), []);
        assert!(store.tree.is_empty());
    }

    /// A record this agent did not write stops the load and is named.
    #[test]
    fn a_foreign_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, store) = open(dir.path());
        store
            .tree
            .insert(codec::name("api", "k"), &[9u8, 1])
            .unwrap();
        let e = store.load(Nanos(0)).unwrap_err().to_string();
        assert!(e.contains("api\\0k") && e.contains("version 9"), "{e}");
    }
}
