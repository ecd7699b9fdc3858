//! Model-based check of the log store: any sequence of appends, truncations, purges and reopens
//! leaves exactly the entries a simple model predicts, contiguous and with the right log state.

mod storage_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_allocator::raft::LogId;
use leasehold_allocator::storage::{KvStore, LogStore, LogStoreLimits};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{LogState, RaftLogReader};
use proptest::prelude::*;
use storage_support::mem_kv::MemKv;
use storage_support::{blank, log_id};

#[derive(Debug, Clone)]
enum Op {
    Append { count: u64, new_term: bool },
    Truncate { back: u64 },
    Purge { ahead: u64 },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..=8, any::<bool>()).prop_map(|(count, new_term)| Op::Append { count, new_term }),
        2 => (0u64..10).prop_map(|back| Op::Truncate { back }),
        2 => (0u64..12).prop_map(|ahead| Op::Purge { ahead }),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Default)]
struct Model {
    entries: BTreeMap<u64, LogId>,
    last_purged: Option<LogId>,
    term: u64,
}

impl Model {
    fn last_log(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .copied()
            .or(self.last_purged)
    }

    fn next_index(&self) -> u64 {
        self.last_log().map_or(0, |l| l.index + 1)
    }
}

const LIMITS: LogStoreLimits = LogStoreLimits {
    read_entries_max: 5,
    delete_chunk_entries: 3,
};

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let kv: Arc<dyn KvStore> = Arc::new(MemKv::default());
    let mut log = LogStore::open(Arc::clone(&kv), LIMITS).unwrap();
    let mut model = Model {
        term: 1,
        ..Model::default()
    };
    for op in ops {
        match op {
            Op::Append { count, new_term } => {
                model.term += u64::from(new_term);
                let first = model.next_index();
                let entries: Vec<_> = (first..first + count)
                    .map(|i| blank(model.term, i))
                    .collect();
                for e in &entries {
                    model.entries.insert(e.log_id.index, e.log_id);
                }
                log.blocking_append(entries).await.unwrap();
            }
            Op::Truncate { back } => {
                let Some((&first, _)) = model.entries.first_key_value() else {
                    continue;
                };
                let end = model.next_index();
                let at = end - back % (end - first + 1);
                model.entries.retain(|&i, _| i < at);
                log.truncate(log_id(model.term, at)).await.unwrap();
            }
            Op::Purge { ahead } => {
                let start = model.last_purged.map_or(0, |p| p.index + 1);
                let upto = start + ahead;
                let id = model
                    .entries
                    .get(&upto)
                    .copied()
                    .unwrap_or(log_id(model.term, upto));
                model.entries.retain(|&i, _| i > upto);
                model.last_purged = Some(id);
                log.purge(id).await.unwrap();
            }
            Op::Reopen => {
                drop(log);
                log = LogStore::open(Arc::clone(&kv), LIMITS).unwrap();
            }
        }
        let expected_state = LogState {
            last_purged_log_id: model.last_purged,
            last_log_id: model.last_log(),
        };
        prop_assert_eq!(log.get_log_state().await.unwrap(), expected_state);
        let ids: Vec<LogId> = log
            .try_get_log_entries(0..)
            .await
            .unwrap()
            .iter()
            .map(|e| e.log_id)
            .collect();
        let expected: Vec<LogId> = model.entries.values().copied().collect();
        prop_assert_eq!(&ids, &expected);
        let limited = log.limited_get_log_entries(0, u64::MAX).await.unwrap();
        prop_assert_eq!(limited.len(), expected.len().min(LIMITS.read_entries_max));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn log_store_matches_model(ops in prop::collection::vec(op(), 1..30)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(run(ops))?;
    }
}
