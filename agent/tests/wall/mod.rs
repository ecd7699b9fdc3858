//! A wall clock the engine tests set by hand.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A wall clock starting at `start` (RFC 3339), in whole seconds; store into the returned
/// cell to move it.
pub fn manual_wall(start: &str) -> (Arc<AtomicI64>, impl Fn() -> jiff::Timestamp + Send + Sync) {
    let secs = start.parse::<jiff::Timestamp>().unwrap().as_second();
    let cell = Arc::new(AtomicI64::new(secs));
    let read = Arc::clone(&cell);
    let clock = move || jiff::Timestamp::from_second(read.load(Ordering::SeqCst)).unwrap();
    (cell, clock)
}
