//! The agent's lease state in a sled database (`--state-file`).

use super::state::{LeaseStore, Recorded, StateBatch, StateError};
use std::path::Path;

const MARKS_TREE: &str = "marks";
const REQUEST_IDS_END_KEY: &[u8] = b"request_ids_end";

/// Lease marks and the request-id reservation in one sled database.
#[derive(Clone, Debug)]
pub struct SledStore {
    db: sled::Db,
    marks: sled::Tree,
    /// Refuse to load more leases than the manager may hold: a bigger file is not ours.
    leases_max: usize,
}

fn storage(e: sled::Error) -> StateError {
    StateError::Storage(e.to_string())
}

impl SledStore {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path, leases_max: usize) -> Result<SledStore, StateError> {
        // sled releases its file lock from a background thread after the last handle is
        // dropped, so a store reopened at once (a restart in the same process) may wait.
        let attempts_max = LOCK_WAIT_MS / LOCK_RETRY_MS + 1;
        let mut attempt = 1;
        let db = loop {
            match sled::open(path) {
                Ok(db) => break db,
                Err(e) if attempt < attempts_max && is_lock_conflict(&e) => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(LOCK_RETRY_MS));
                }
                Err(e) => {
                    return Err(StateError::Storage(format!(
                        "opening {}: {e}",
                        path.display()
                    )))
                }
            }
        };
        let marks = db.open_tree(MARKS_TREE).map_err(storage)?;
        Ok(SledStore {
            db,
            marks,
            leases_max,
        })
    }
}

impl SledStore {
    /// Another tree of the same database, for state kept beside the leases' (one process
    /// holds the file's lock, so everything it keeps shares this handle).
    pub fn tree(&self, name: &str) -> Result<sled::Tree, StateError> {
        self.db.open_tree(name).map_err(storage)
    }
}

/// Longest wait for another handle's file lock on the state file.
const LOCK_WAIT_MS: u64 = 5_000;
/// Pause between attempts to take the lock.
const LOCK_RETRY_MS: u64 = 10;

/// sled reports a held file lock only through the message of a generic I/O error.
fn is_lock_conflict(err: &sled::Error) -> bool {
    matches!(err, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

fn be_u64(key: &str, bytes: &[u8]) -> Result<u64, StateError> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| StateError::Corrupt {
        key: key.to_owned(),
        len: bytes.len(),
    })?;
    Ok(u64::from_be_bytes(arr))
}

impl LeaseStore for SledStore {
    fn load(&self) -> Result<Recorded, StateError> {
        let mut out = Recorded::default();
        if let Some(v) = self.db.get(REQUEST_IDS_END_KEY).map_err(storage)? {
            out.request_ids_end = be_u64("request_ids_end", &v)?;
        }
        for item in self.marks.iter() {
            let (k, v) = item.map_err(storage)?;
            let lease = be_u64("lease id", &k)?;
            out.marks
                .insert(lease, be_u64(&format!("mark of lease {lease}"), &v)?);
            if out.marks.len() > self.leases_max {
                return Err(StateError::TooManyLeases {
                    count: out.marks.len(),
                    max: self.leases_max,
                });
            }
        }
        Ok(out)
    }

    fn commit(&self, batch: &StateBatch) -> Result<(), StateError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut marks = sled::Batch::default();
        for &(lease, mark) in &batch.marks {
            marks.insert(&lease.to_be_bytes(), &mark.to_be_bytes());
        }
        for lease in &batch.forget {
            marks.remove(&lease.to_be_bytes());
        }
        self.marks.apply_batch(marks).map_err(storage)?;
        if let Some(end) = batch.request_ids_end {
            // Only ever raised: an older, lower reservation must not undo a newer one.
            self.db
                .fetch_and_update(REQUEST_IDS_END_KEY, |old| {
                    let old = old.and_then(|b| <[u8; 8]>::try_from(b).ok());
                    let old = old.map_or(0, u64::from_be_bytes);
                    Some(old.max(end).to_be_bytes().to_vec())
                })
                .map_err(storage)?;
        }
        // The mark must be on disk before the slot may spend up to it.
        self.db.flush().map_err(storage)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::state::{apply, MemoryStore};
    use proptest::prelude::*;

    #[test]
    fn a_reopened_file_reads_what_was_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        {
            let s = SledStore::open(&path, 10).unwrap();
            s.commit(&StateBatch {
                marks: vec![(7, 70), (8, 80)],
                forget: vec![8],
                request_ids_end: Some(20_000),
            })
            .unwrap();
        }
        let s = SledStore::open(&path, 10).unwrap();
        let r = s.load().unwrap();
        assert_eq!(r.marks.into_iter().collect::<Vec<_>>(), vec![(7, 70)]);
        assert_eq!(r.request_ids_end, 20_000);
    }

    #[test]
    fn more_leases_than_leases_max_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(&dir.path().join("state"), 1).unwrap();
        s.commit(&StateBatch {
            marks: vec![(1, 1), (2, 2)],
            ..StateBatch::default()
        })
        .unwrap();
        assert!(matches!(
            s.load(),
            Err(StateError::TooManyLeases { count: 2, max: 1 })
        ));
    }

    fn batch() -> impl Strategy<Value = StateBatch> {
        (
            prop::collection::vec((0u64..8, 0u64..1_000), 0..4),
            prop::collection::vec(0u64..8, 0..2),
            prop::option::of(0u64..100_000),
        )
            .prop_map(|(marks, forget, request_ids_end)| StateBatch {
                marks,
                forget,
                request_ids_end,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The file means what the model means, batch after batch (a restart reads the same).
        #[test]
        fn sled_store_matches_the_model(batches in prop::collection::vec(batch(), 1..12)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state");
            let model = MemoryStore::new();
            let mut expected = Recorded::default();
            {
                let s = SledStore::open(&path, 100).unwrap();
                for b in &batches {
                    s.commit(b).unwrap();
                    model.commit(b).unwrap();
                    apply(&mut expected, b);
                }
            }
            let reopened = SledStore::open(&path, 100).unwrap().load().unwrap();
            prop_assert_eq!(&reopened, &expected);
            prop_assert_eq!(&model.load().unwrap(), &expected);
        }
    }
}
