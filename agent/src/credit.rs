//! One key's leased credit as the admission hot path sees it.
//!
//! The hot path and the lease manager share a [`CreditSlot`]. Spending is one atomic
//! compare-and-swap on `remaining`; everything else (which lease, how much was deposited or
//! handed back) belongs to the lease manager, which is the only writer of the totals it
//! keeps. That split makes usage exact without locks: at any instant
//! `spent = deposited − withdrawn − remaining`, and [`CreditSlot::close`] swaps `remaining`
//! to zero, so a lease's final usage is known exactly even while requests race it (P2).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Where a slot stands in its lease's life; written by the lease manager, read by the hot
/// path and by the key table's eviction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SlotState {
    /// No lease and none asked for.
    Idle = 0,
    /// An acquire is queued or in flight.
    Acquiring = 1,
    /// A lease is held.
    Active = 2,
    /// The grantor could not be reached; the failure behaviour of the policy applies.
    Unreachable = 3,
    /// The grantor refused credit for now (exhausted); retry after a delay.
    Denied = 4,
}

impl SlotState {
    fn from_u8(v: u8) -> SlotState {
        match v {
            1 => SlotState::Acquiring,
            2 => SlotState::Active,
            3 => SlotState::Unreachable,
            4 => SlotState::Denied,
            _ => SlotState::Idle,
        }
    }
}

/// Leased credit of one policy key in one agent.
#[derive(Debug, Default)]
pub struct CreditSlot {
    /// Units that may still be spent under the current lease.
    remaining: AtomicU64,
    /// Holder-side deadline of the current lease on the agent's monotonic timeline (ns);
    /// zero when there is none.
    deadline_ns: AtomicU64,
    /// Units offered (admitted or not) since the slot was created: the demand signal.
    offered: AtomicU64,
    /// Last time (monotonic ns) the slot saw traffic, for idle release and eviction.
    last_offered_ns: AtomicU64,
    state: AtomicU8,
}

impl CreditSlot {
    pub fn new() -> Self {
        Self::default()
    }

    /// Spends `units` if the lease is live at `now_ns` and holds enough. One CAS loop, no
    /// allocation, no I/O: the deny path is as cheap as the admit path.
    #[inline]
    pub fn try_spend(&self, units: u64, now_ns: u64) -> bool {
        if now_ns >= self.deadline_ns.load(Ordering::Acquire) {
            return false;
        }
        let mut cur = self.remaining.load(Ordering::Acquire);
        loop {
            if cur < units {
                return false;
            }
            match self.remaining.compare_exchange_weak(
                cur,
                cur - units,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Gives back units spent by [`try_spend`](Self::try_spend) for a request that was not
    /// admitted after all (another dimension refused). The units were never used, so
    /// returning them keeps `spent` exact.
    #[inline]
    pub fn refund(&self, units: u64) {
        self.remaining.fetch_add(units, Ordering::AcqRel);
    }

    /// Records traffic for the demand signal.
    #[inline]
    pub fn note_offered(&self, units: u64, now_ns: u64) {
        self.offered.fetch_add(units, Ordering::Relaxed);
        self.last_offered_ns.store(now_ns, Ordering::Relaxed);
    }

    /// Adds newly leased credit and moves the deadline (lease manager only).
    pub fn deposit(&self, units: u64, deadline_ns: u64) {
        self.remaining.fetch_add(units, Ordering::AcqRel);
        self.deadline_ns.store(deadline_ns, Ordering::Release);
    }

    /// Takes up to `units` out so they can be handed back; returns how many were taken
    /// (lease manager only). Taken units can no longer be spent here.
    pub fn withdraw(&self, units: u64) -> u64 {
        let mut cur = self.remaining.load(Ordering::Acquire);
        loop {
            let take = units.min(cur);
            match self.remaining.compare_exchange_weak(
                cur,
                cur - take,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return take,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Ends spending under the current lease: no spend succeeds afterwards until the next
    /// deposit. Returns the units that were left unspent (lease manager only).
    pub fn close(&self) -> u64 {
        self.deadline_ns.store(0, Ordering::Release);
        self.remaining.swap(0, Ordering::AcqRel)
    }

    pub fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::Acquire)
    }

    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns.load(Ordering::Acquire)
    }

    pub fn offered(&self) -> u64 {
        self.offered.load(Ordering::Relaxed)
    }

    pub fn last_offered_ns(&self) -> u64 {
        self.last_offered_ns.load(Ordering::Relaxed)
    }

    pub fn state(&self) -> SlotState {
        SlotState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub fn set_state(&self, state: SlotState) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Moves from `from` to `to` if the slot is in `from`; true if it did. The hot path uses
    /// it to claim the one acquire request for an idle slot.
    pub fn transition(&self, from: SlotState, to: SlotState) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn spends_only_live_credit() {
        let s = CreditSlot::new();
        assert!(!s.try_spend(1, 0), "no lease yet");
        s.deposit(10, 100);
        assert!(s.try_spend(4, 50));
        assert!(!s.try_spend(7, 50));
        assert!(!s.try_spend(1, 100), "at the deadline");
        s.refund(4);
        assert_eq!(s.withdraw(3), 3);
        assert_eq!(s.close(), 7);
        assert!(!s.try_spend(1, 10), "closed");
    }

    #[test]
    fn racing_spenders_and_close_account_for_every_unit() {
        let slot = Arc::new(CreditSlot::new());
        slot.deposit(100_000, u64::MAX);
        let spenders: Vec<_> = (0..4)
            .map(|_| {
                let slot = Arc::clone(&slot);
                std::thread::spawn(move || {
                    let mut admitted = 0u64;
                    for _ in 0..40_000 {
                        if slot.try_spend(1, 1) {
                            admitted += 1;
                        }
                    }
                    admitted
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let unspent = slot.close();
        let admitted: u64 = spenders.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(admitted + unspent, 100_000, "final usage must be exact");
    }
}
