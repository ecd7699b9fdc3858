//! Disk use of a cluster's nodes while a load generator runs: the bytes under each node's
//! data directory (sled's files: the Raft log, the state machine, snapshots), sampled on a
//! timer so growth under churn shows, not only the size at the end.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of every file under `path`, 0 for what cannot be read.
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// Prints each of `dirs`' sizes in MiB every `every_s` seconds until `stop` is set.
pub async fn sample(dirs: Vec<PathBuf>, every_s: u64, stop: Arc<AtomicBool>) {
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(every_s)).await;
        let sizes: Vec<String> = dirs
            .iter()
            .map(|d| format!("{:.1}", dir_bytes(d) as f64 / (1 << 20) as f64))
            .collect();
        println!(
            "disk at {:>5} s: {} MiB",
            started.elapsed().as_secs(),
            sizes.join(" / ")
        );
    }
}
