//! Handing memory freed after a burst back to the system.
//!
//! glibc's malloc keeps what is freed in its arenas (one per thread that allocated, up to
//! eight per core) for reuse, and gives back only the top of the main heap by itself. A
//! burst of large gRPC requests spread over the runtime's threads therefore left the
//! agent's resident memory at its peak (1.4 GB after 1 600 calls of 3.8 MB) long after the
//! callers left, and an allocator node the same after a burst of large lease or admin
//! calls. `malloc_trim(0)` returns the free pages of every arena; it costs well under
//! a millisecond when there is little to give back, so running it every few seconds is
//! cheap. Other allocators (musl, jemalloc) return memory on their own terms; this does
//! nothing there.

use std::time::Duration;

/// How often freed memory is handed back.
pub const HEAP_TRIM_INTERVAL_MS: u64 = 5_000;

/// Starts a task that hands freed heap memory back every [`HEAP_TRIM_INTERVAL_MS`].
pub fn spawn_trim() {
    tokio::spawn(async {
        let mut tick = tokio::time::interval(Duration::from_millis(HEAP_TRIM_INTERVAL_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            trim();
        }
    });
}

/// Returns the free pages of every malloc arena to the system.
#[cfg(target_env = "gnu")]
pub fn trim() {
    // SAFETY: malloc_trim takes no pointers and only walks glibc's own arenas under their
    // locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Nothing to do outside glibc.
#[cfg(not(target_env = "gnu"))]
pub fn trim() {}
