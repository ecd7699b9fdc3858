//! A standalone agent's window counts in its state file (`--state-file`), so that a
//! restart keeps every user's window where it was.
//!
//! The counts of keys used since the last save are written every [`SAVE_INTERVAL_MS`] and
//! all of them once serving has stopped on SIGTERM or Ctrl-C, so an orderly restart loses
//! nothing. A `kill -9` loses what was counted since the last save: the restarted agent
//! may admit again, per key, the hits it admitted in the last interval before the kill, so
//! a window admits at most its limit plus those (never more than twice its limit).

use crate::engine::{Engine, WindowCount};
use leasehold_common::time::{Clock, Nanos};
use std::sync::Arc;
use thiserror::Error;

/// The state file's tree of window counts.
pub const WINDOWS_TREE: &str = "windows";
/// Time between two saves of the counts that changed.
pub const SAVE_INTERVAL_MS: u64 = 1_000;
/// A key counts as changed if used this long before the previous save: its last use is
/// recorded up to a millisecond late, and a charge may land a little after that record.
const USED_SLACK_NS: u64 = 1_000_000_000;

#[derive(Debug, Error)]
pub enum WindowStoreError {
    #[error("state file: {0}")]
    Storage(#[from] sled::Error),
    #[error("state file: a window count of {len} bytes is not one this agent wrote")]
    Corrupt { len: usize },
}

/// Window counts in one tree: `policy id \0 key` → window length, window index, count.
#[derive(Clone, Debug)]
pub struct WindowStore {
    tree: sled::Tree,
}

impl WindowStore {
    pub fn new(tree: sled::Tree) -> WindowStore {
        WindowStore { tree }
    }

    /// Writes `counts` in one atomic batch and flushes the file.
    pub fn save(&self, counts: &[WindowCount]) -> Result<(), WindowStoreError> {
        if counts.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for c in counts {
            let mut value = [0u8; 24];
            value[..8].copy_from_slice(&c.window_ns.to_be_bytes());
            value[8..16].copy_from_slice(&c.index.to_be_bytes());
            value[16..].copy_from_slice(&c.count.to_be_bytes());
            batch.insert(name(&c.policy_id, &c.key), &value[..]);
        }
        self.tree.apply_batch(batch)?;
        self.tree.flush()?;
        Ok(())
    }

    /// Every count recorded whose window had not ended at UNIX time `unix`; the others
    /// are removed from the file.
    pub fn load(&self, unix: Nanos) -> Result<Vec<WindowCount>, WindowStoreError> {
        let mut out = Vec::new();
        let mut ended = sled::Batch::default();
        for item in self.tree.iter() {
            let (k, v) = item?;
            let v: [u8; 24] = v[..]
                .try_into()
                .map_err(|_| WindowStoreError::Corrupt { len: v.len() })?;
            let be = |i: usize| u64::from_be_bytes(v[i..i + 8].try_into().expect("8 bytes"));
            let (window_ns, index, count) = (be(0), be(8), be(16));
            let end = index.saturating_add(1).saturating_mul(window_ns.max(1));
            let text = String::from_utf8_lossy(&k);
            match text.split_once('\0') {
                Some((policy_id, key)) if end > unix.0 => out.push(WindowCount {
                    policy_id: policy_id.to_owned(),
                    key: key.to_owned(),
                    window_ns,
                    index,
                    count,
                }),
                _ => ended.remove(k),
            }
        }
        self.tree.apply_batch(ended)?;
        Ok(out)
    }
}

fn name(policy_id: &str, key: &str) -> Vec<u8> {
    let mut name = Vec::with_capacity(policy_id.len() + 1 + key.len());
    name.extend_from_slice(policy_id.as_bytes());
    name.push(0);
    name.extend_from_slice(key.as_bytes());
    name
}

/// Puts the file's counts back into `engine` (before it serves); returns how many.
pub fn restore(
    engine: &Engine,
    store: &WindowStore,
    clock: &impl Clock,
) -> Result<usize, WindowStoreError> {
    let now = clock.now();
    let counts = store.load(engine.unix_time(now))?;
    Ok(engine.restore_window_counts(counts, now))
}

/// Saves the counts of recently used keys every [`SAVE_INTERVAL_MS`] until `stop` turns
/// true, then every count still open. A failed save is logged and retried next time.
pub async fn run(
    engine: Arc<Engine>,
    store: WindowStore,
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
        let counts = engine.window_counts(since, now);
        match store.save(&counts) {
            Ok(()) => since = Nanos(now.0.saturating_sub(USED_SLACK_NS)),
            Err(e) => tracing::warn!(error = %e, "window counts not saved; retried next second"),
        }
    }
    let counts = engine.window_counts(Nanos::ZERO, clock.now());
    match store.save(&counts) {
        Ok(()) => tracing::info!(windows = counts.len(), "window counts saved"),
        Err(e) => tracing::error!(error = %e, "window counts not saved at shutdown"),
    }
}
