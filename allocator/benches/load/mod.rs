//! What the load generators share: flags, running callers for a while, and the report of
//! their latencies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The number after flag `name` on the command line, or `default`.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Latencies of the operations that succeeded, sorted, and the run's length.
pub struct Latencies {
    sorted: Vec<Duration>,
    elapsed_s: f64,
}

impl Latencies {
    /// Lets `callers` (each returning its latencies once `stop` is set) run for `seconds`.
    pub async fn run(
        seconds: u64,
        stop: Arc<AtomicBool>,
        callers: impl FnOnce() -> Vec<JoinHandle<Vec<Duration>>>,
    ) -> Latencies {
        let started = Instant::now();
        let tasks = callers();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut sorted = Vec::new();
        for t in tasks {
            sorted.extend(t.await.unwrap());
        }
        sorted.sort();
        Latencies {
            sorted,
            elapsed_s: started.elapsed().as_secs_f64(),
        }
    }

    fn pct(&self, p: f64) -> Duration {
        let last = self.sorted.len().saturating_sub(1);
        let i = ((self.sorted.len() as f64 * p) as usize).min(last);
        self.sorted.get(i).copied().unwrap_or_default()
    }

    /// Prints the count, the rate and p50 / p99 / max of the operations named `what`.
    pub fn print(&self, what: &str) {
        let n = self.sorted.len();
        println!("{what}s: {n} ({:.0}/s)", n as f64 / self.elapsed_s);
        println!(
            "{what} p50: {:?}  p99: {:?}  max: {:?}",
            self.pct(0.50),
            self.pct(0.99),
            self.sorted.last().copied().unwrap_or_default()
        );
    }
}
