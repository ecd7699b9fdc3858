//! An in-memory [`KvStore`] for fast model-based tests of the logic above the engine.

use std::collections::BTreeMap;
use std::sync::Mutex;

use leasehold_allocator::storage::kv::{KeyRange, KvPair, ScanOrder, WriteBatch, WriteOp};
use leasehold_allocator::storage::{Keyspace, KvError, KvStore};

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
pub struct MemKv {
    trees: Mutex<BTreeMap<Keyspace, Tree>>,
}

impl KvStore for MemKv {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let trees = self.trees.lock().unwrap();
        Ok(trees.get(&ks).and_then(|t| t.get(key).cloned()))
    }

    fn put(&self, ks: Keyspace, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let mut trees = self.trees.lock().unwrap();
        trees
            .entry(ks)
            .or_default()
            .insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&self, ks: Keyspace, key: &[u8]) -> Result<(), KvError> {
        let mut trees = self.trees.lock().unwrap();
        trees.entry(ks).or_default().remove(key);
        Ok(())
    }

    fn scan(
        &self,
        ks: Keyspace,
        range: &KeyRange,
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KvPair>, KvError> {
        if limit == 0 {
            return Err(KvError::ZeroScanLimit { keyspace: ks });
        }
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let trees = self.trees.lock().unwrap();
        let Some(tree) = trees.get(&ks) else {
            return Ok(Vec::new());
        };
        let it = tree.range((range.start.clone(), range.end.clone()));
        let pair = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
        Ok(match order {
            ScanOrder::Ascending => it.take(limit).map(pair).collect(),
            ScanOrder::Descending => it.rev().take(limit).map(pair).collect(),
        })
    }

    fn write(&self, batch: WriteBatch) -> Result<(), KvError> {
        let mut trees = self.trees.lock().unwrap();
        for op in batch.into_ops() {
            match op {
                WriteOp::Put {
                    keyspace,
                    key,
                    value,
                } => {
                    trees.entry(keyspace).or_default().insert(key, value);
                }
                WriteOp::Delete { keyspace, key } => {
                    trees.entry(keyspace).or_default().remove(&key);
                }
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), KvError> {
        Ok(())
    }

    fn size_on_disk_bytes(&self) -> Result<u64, KvError> {
        Ok(0)
    }
}
