//! One key's leased credit as the admission hot path sees it.
//!
//! The hot path and the lease manager share a [`CreditSlot`]. Spending is one atomic
//! compare-and-swap on a word that packs the lease's *epoch* (16 bits) with its remaining
//! credit (48 bits); everything else (which lease, how much was deposited or handed back)
//! belongs to the lease manager, which is the only writer of the totals it keeps. That split
//! makes usage exact without locks: at any instant `spent = deposited − withdrawn −
//! remaining`, and [`CreditSlot::close`] swaps the remaining credit to zero and moves to a
//! new epoch, so a lease's final usage is known exactly even while requests race it (P2).
//!
//! A spend returns a [`SpendTicket`] naming its epoch. A refund (a multi-dimensional
//! admission that failed elsewhere) succeeds only in the same epoch: units spent under a
//! lease that has since closed were counted in its final usage and must not reappear in
//! the next lease.

use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Ordering};

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

/// Bits of the packed word that hold the remaining credit; the rest hold the epoch.
const REMAINING_BITS: u32 = 48;
const REMAINING_MASK: u64 = (1 << REMAINING_BITS) - 1;
/// Largest credit one slot can hold (about 2.8 × 10¹⁴ units).
pub const SLOT_CREDIT_MAX: u64 = REMAINING_MASK;

fn unpack(word: u64) -> (u64, u64) {
    (word >> REMAINING_BITS, word & REMAINING_MASK)
}

fn pack(epoch: u64, remaining: u64) -> u64 {
    ((epoch & 0xffff) << REMAINING_BITS) | (remaining & REMAINING_MASK)
}

/// A spend rewrites `last_offered_ns` only once it is this far behind, so that admissions
/// do not all store to it; idle release works in seconds.
const OFFERED_TOUCH_NS: u64 = 1_000_000;

/// Proof of a spend, for undoing it while its lease is still the slot's lease.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SpendTicket {
    epoch: u64,
}

/// A key's own counts at this agent, cumulative since its slot was made.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotCounts {
    /// Units this key's policy refused here.
    pub refused: u64,
    /// Units admitted without credit because the grantor could not be reached.
    pub fail_open: u64,
    /// Units admitted with a delay (a shaping policy pacing held credit).
    pub shaped: u64,
}

impl SlotCounts {
    /// The counts gained since `base`.
    pub fn since(self, base: SlotCounts) -> SlotCounts {
        SlotCounts {
            refused: self.refused.saturating_sub(base.refused),
            fail_open: self.fail_open.saturating_sub(base.fail_open),
            shaped: self.shaped.saturating_sub(base.shaped),
        }
    }
}

/// Leased credit of one policy key in one agent.
#[derive(Debug, Default)]
pub struct CreditSlot {
    /// Epoch (high 16 bits) and units that may still be spent under it (low 48 bits).
    packed: AtomicU64,
    /// Holder-side deadline of the current lease on the agent's monotonic timeline (ns);
    /// zero when there is none.
    deadline_ns: AtomicU64,
    /// Units offered and not spent here (refused, or spent and given back) since the slot
    /// was created. With the units spent, derived from the totals below, this is the
    /// demand signal: counting spent units too would add an atomic write to every
    /// admission.
    unspent_offered: AtomicU64,
    /// Credit ever deposited, withdrawn, and left unspent at a close (lease manager only).
    deposited_total: AtomicU64,
    withdrawn_total: AtomicU64,
    closed_total: AtomicU64,
    /// Last time (monotonic ns) the slot saw traffic, for idle release and eviction; kept
    /// to within [`OFFERED_TOUCH_NS`].
    last_offered_ns: AtomicU64,
    /// Requests a shadow-mode policy would have denied under the current lease.
    shadow_denied: AtomicU64,
    /// Units refused and admitted fail-open here, ever; a lease reports the growth since it
    /// started from the part earlier leases had not had acknowledged.
    refused_units: AtomicU64,
    fail_open_units: AtomicU64,
    shaped_units: AtomicU64,
    /// The counts grantors acknowledged under earlier leases of this slot (lease manager
    /// only): the next lease reports what came after.
    acknowledged_refused: AtomicU64,
    acknowledged_fail_open: AtomicU64,
    acknowledged_shaped: AtomicU64,
    /// While [`SlotState::Denied`]: when the grantor said credit may be granted again
    /// (monotonic ns), the retry hint refusals give; zero when it named no time.
    retry_at_ns: AtomicU64,
    state: AtomicU8,
    /// Set when the engine dropped the key: nothing spends this slot any more.
    detached: AtomicBool,
}

impl CreditSlot {
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the packed word with `f` (None: leave it) in one CAS loop; returns the word
    /// before the change, or None if `f` declined.
    #[inline]
    fn update(&self, mut f: impl FnMut(u64, u64) -> Option<u64>) -> Option<u64> {
        let mut cur = self.packed.load(Ordering::Acquire);
        loop {
            let (epoch, remaining) = unpack(cur);
            let next = f(epoch, remaining)?;
            match self
                .packed
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(cur),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Spends `units` if the lease is live at `now_ns` and holds enough. One CAS loop, no
    /// allocation, no I/O: the deny path is as cheap as the admit path.
    #[inline(always)]
    pub fn try_spend(&self, units: u64, now_ns: u64) -> Option<SpendTicket> {
        if now_ns >= self.deadline_ns.load(Ordering::Acquire) {
            return None;
        }
        let before = self.update(|epoch, remaining| {
            (remaining >= units).then(|| pack(epoch, remaining - units))
        })?;
        let last = self.last_offered_ns.load(Ordering::Relaxed);
        if now_ns > last.saturating_add(OFFERED_TOUCH_NS) {
            self.last_offered_ns.store(now_ns, Ordering::Relaxed);
        }
        Some(SpendTicket {
            epoch: unpack(before).0,
        })
    }

    /// Gives back units of a spend whose request was not admitted after all (another
    /// dimension refused). Only while the same lease is the slot's lease; otherwise the
    /// units stay counted as spent, which is safe. Returns whether they were given back.
    #[inline]
    pub fn refund(&self, units: u64, ticket: SpendTicket) -> bool {
        let refunded = self
            .update(|epoch, remaining| {
                (epoch == ticket.epoch)
                    .then(|| pack(epoch, remaining.saturating_add(units).min(REMAINING_MASK)))
            })
            .is_some();
        if refunded {
            // Offered all the same: no longer counted as spent, so counted here.
            self.unspent_offered.fetch_add(units, Ordering::Relaxed);
        }
        refunded
    }

    /// Records units offered and not spent from this slot, for the demand signal.
    #[inline]
    pub fn note_unspent(&self, units: u64, now_ns: u64) {
        self.unspent_offered.fetch_add(units, Ordering::Relaxed);
        self.last_offered_ns.store(now_ns, Ordering::Relaxed);
    }

    /// Counts a request the policy, in shadow mode, would have denied.
    #[inline]
    pub fn note_shadow_denied(&self) {
        self.shadow_denied.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts units this key's policy refused.
    #[inline]
    pub fn note_refused(&self, units: u64) {
        self.refused_units.fetch_add(units, Ordering::Relaxed);
    }

    /// Counts units admitted without credit while the grantor could not be reached.
    #[inline]
    pub fn note_fail_open(&self, units: u64) {
        self.fail_open_units.fetch_add(units, Ordering::Relaxed);
    }

    /// Counts units admitted with a delay.
    #[inline]
    pub fn note_shaped(&self, units: u64) {
        self.shaped_units.fetch_add(units, Ordering::Relaxed);
    }

    /// Refused, fail-open and shaped units so far.
    pub fn counts(&self) -> SlotCounts {
        SlotCounts {
            refused: self.refused_units.load(Ordering::Relaxed),
            fail_open: self.fail_open_units.load(Ordering::Relaxed),
            shaped: self.shaped_units.load(Ordering::Relaxed),
        }
    }

    /// The counts a grantor acknowledged so far (where a new lease starts counting).
    pub fn acknowledged(&self) -> SlotCounts {
        SlotCounts {
            refused: self.acknowledged_refused.load(Ordering::Relaxed),
            fail_open: self.acknowledged_fail_open.load(Ordering::Relaxed),
            shaped: self.acknowledged_shaped.load(Ordering::Relaxed),
        }
    }

    /// A grantor acknowledged a report or release of `counts` (lease manager only).
    pub fn acknowledge(&self, counts: SlotCounts) {
        self.acknowledged_refused
            .fetch_max(counts.refused, Ordering::Relaxed);
        self.acknowledged_fail_open
            .fetch_max(counts.fail_open, Ordering::Relaxed);
        self.acknowledged_shaped
            .fetch_max(counts.shaped, Ordering::Relaxed);
    }

    /// Would-deny requests under the current lease (reported with it, cumulative).
    pub fn shadow_denied(&self) -> u64 {
        self.shadow_denied.load(Ordering::Relaxed)
    }

    /// Adds newly leased credit and moves the deadline (lease manager only).
    pub fn deposit(&self, units: u64, deadline_ns: u64) {
        let before = self.update(|epoch, remaining| {
            Some(pack(
                epoch,
                remaining.saturating_add(units).min(REMAINING_MASK),
            ))
        });
        let before = unpack(before.unwrap_or(0)).1;
        let added = units.min(REMAINING_MASK - before);
        self.deposited_total.fetch_add(added, Ordering::Relaxed);
        self.deadline_ns.store(deadline_ns, Ordering::Release);
    }

    /// Takes up to `units` out so they can be handed back; returns how many were taken
    /// (lease manager only). Taken units can no longer be spent here.
    pub fn withdraw(&self, units: u64) -> u64 {
        let before =
            self.update(|epoch, remaining| Some(pack(epoch, remaining - units.min(remaining))));
        let taken = units.min(unpack(before.unwrap_or(0)).1);
        self.withdrawn_total.fetch_add(taken, Ordering::Relaxed);
        taken
    }

    /// Ends spending under the current lease and starts a new epoch: no spend succeeds
    /// afterwards until the next deposit, and refunds of earlier spends are refused.
    /// Returns the units that were left unspent (lease manager only).
    pub fn close(&self) -> u64 {
        self.deadline_ns.store(0, Ordering::Release);
        // The count is per lease: the next lease on this slot reports from zero.
        self.shadow_denied.store(0, Ordering::Relaxed);
        let before = self.update(|epoch, _| Some(pack(epoch.wrapping_add(1), 0)));
        let unspent = unpack(before.unwrap_or(0)).1;
        self.closed_total.fetch_add(unspent, Ordering::Relaxed);
        unspent
    }

    pub fn remaining(&self) -> u64 {
        unpack(self.packed.load(Ordering::Acquire)).1
    }

    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns.load(Ordering::Acquire)
    }

    /// Units offered (admitted or not) since the slot was created: what was spent from it
    /// plus what was offered and not spent. Exact while no spend races the reading; a
    /// racing spend is counted or not.
    pub fn offered(&self) -> u64 {
        // Only the lease manager moves the totals, and it is the reader; what races is a
        // spend (counted or not yet) or a refund (briefly counted twice).
        let remaining = self.remaining();
        let out = self.withdrawn_total.load(Ordering::Relaxed)
            + self.closed_total.load(Ordering::Relaxed)
            + remaining;
        let spent = self
            .deposited_total
            .load(Ordering::Relaxed)
            .saturating_sub(out);
        spent.wrapping_add(self.unspent_offered.load(Ordering::Relaxed))
    }

    pub fn last_offered_ns(&self) -> u64 {
        self.last_offered_ns.load(Ordering::Relaxed)
    }

    /// Refuses spending until the grantor grants again, which it said may be at
    /// `retry_at_ns` (lease manager only).
    pub fn deny_until(&self, retry_at_ns: u64) {
        self.retry_at_ns.store(retry_at_ns, Ordering::Relaxed);
        self.set_state(SlotState::Denied);
    }

    /// Nanoseconds from `now_ns` until the grantor said credit may come again (zero when it
    /// named no time or the time has passed).
    #[inline]
    pub fn retry_after_ns(&self, now_ns: u64) -> u64 {
        self.retry_at_ns
            .load(Ordering::Relaxed)
            .saturating_sub(now_ns)
    }

    /// Marks the slot as dropped by the engine (its key was evicted or its policy
    /// removed); the lease manager then hands the lease back.
    pub fn detach(&self) {
        self.detached.store(true, Ordering::Release);
    }

    /// Whether the engine dropped the key this slot belonged to.
    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
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

// Under loom these would run outside a model; tests/loom_credit.rs models the slot there.
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn spends_only_live_credit() {
        let s = CreditSlot::new();
        assert!(s.try_spend(1, 0).is_none(), "no lease yet");
        s.deposit(10, 100);
        let ticket = s.try_spend(4, 50).expect("enough credit");
        assert!(s.try_spend(7, 50).is_none());
        assert!(s.try_spend(1, 100).is_none(), "at the deadline");
        assert!(s.refund(4, ticket));
        assert_eq!(s.withdraw(3), 3);
        assert_eq!(s.close(), 7);
        assert!(s.try_spend(1, 10).is_none(), "closed");
    }

    #[test]
    fn refund_after_close_never_reaches_the_next_lease() {
        let s = CreditSlot::new();
        s.deposit(10, 100);
        let ticket = s.try_spend(6, 1).unwrap();
        assert_eq!(
            s.close(),
            4,
            "the 6 spent count in the old lease's final usage"
        );
        s.deposit(5, 100);
        assert!(
            !s.refund(6, ticket),
            "old lease's units must not top up the new one"
        );
        assert_eq!(s.remaining(), 5);
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
                        if slot.try_spend(1, 1).is_some() {
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
