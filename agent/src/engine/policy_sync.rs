//! How current the policies taken from the allocator are: when its watch stream last
//! confirmed them, against how long they may go unconfirmed before they count as stale.
//!
//! An agent keeps enforcing the policies it has while its allocator is out of reach, but a
//! policy change or an emergency switch made meanwhile has not reached it. Operators alert
//! on the age instead of the agent guessing what to do with rules it cannot refresh.

use std::sync::atomic::{AtomicU64, Ordering};

/// Shared between the lease manager (writes) and the metrics endpoint (reads).
#[derive(Debug, Default)]
pub(super) struct PolicySync {
    /// Unix milliseconds of the last confirmation; 0: none yet.
    confirmed_unix_ms: AtomicU64,
    /// 0: the policies do not come from an allocator.
    stale_after_ms: AtomicU64,
}

/// A snapshot of [`PolicySync`] for an agent that follows its allocator's policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicySyncStats {
    /// Unix milliseconds of the last confirmation; 0: none yet.
    pub confirmed_unix_ms: u64,
    pub stale_after_ms: u64,
}

impl PolicySync {
    pub(super) fn follow(&self, stale_after_ms: u64) {
        self.stale_after_ms
            .store(stale_after_ms.max(1), Ordering::Relaxed);
    }

    pub(super) fn confirmed(&self, unix_ms: u64) {
        self.confirmed_unix_ms.fetch_max(unix_ms, Ordering::Relaxed);
    }

    pub(super) fn stats(&self) -> Option<PolicySyncStats> {
        match self.stale_after_ms.load(Ordering::Relaxed) {
            0 => None,
            stale_after_ms => Some(PolicySyncStats {
                confirmed_unix_ms: self.confirmed_unix_ms.load(Ordering::Relaxed),
                stale_after_ms,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_only_when_following_and_never_goes_back() {
        let s = PolicySync::default();
        s.confirmed(5);
        assert_eq!(s.stats(), None, "policies not from an allocator");
        s.follow(60_000);
        s.confirmed(10);
        s.confirmed(7);
        assert_eq!(
            s.stats(),
            Some(PolicySyncStats {
                confirmed_unix_ms: 10,
                stale_after_ms: 60_000
            })
        );
    }
}
