//! What the dimensions of one request charged, kept until the request is decided: a later
//! dimension's refusal undoes them, and concurrency units stay held while it runs.
//!
//! A charge is written into its place field by field. Built as one value first, it is
//! assembled on the stack in pieces and copied in with wide reads, and a wide read of
//! pieces stored just before waits for them to reach the cache (a store-forwarding stall
//! that cost a tenth of a three-dimension decision).

use super::decision::DIMENSIONS_LIMIT;
use super::table::Entry;
use crate::credit::SpendTicket;
use leasehold_common::time::Nanos;
use std::mem::MaybeUninit;
use std::ptr::addr_of_mut;
use std::sync::Arc;

/// What was charged, by the kind of state it was charged to.
#[derive(Copy, Clone, Debug)]
pub(crate) enum ChargeKind {
    /// Leased credit, refunded with the spend's ticket while its lease lasts.
    Slot(SpendTicket),
    /// A local limiter, refunded as of the charge's times.
    Local,
    /// Concurrency units, held until the request ends.
    InFlight,
    /// The restricted-operation bucket, refunded as of the charge's time.
    Emergency,
}

/// One dimension's charge.
pub(crate) struct Charge {
    pub(crate) kind: ChargeKind,
    pub(crate) entry: Arc<Entry>,
    pub(crate) units: u64,
    /// Monotonic time of the charge.
    pub(crate) at: Nanos,
    /// Wall time of the charge (read only by calendar quotas).
    pub(crate) wall: jiff::Timestamp,
}

/// Charges by dimension index, at most one each.
pub(crate) struct Charges {
    /// Bit `i` set: `kept[i]` holds dimension `i`'s charge.
    present: u32,
    kept: [MaybeUninit<Charge>; DIMENSIONS_LIMIT],
}

const _: () = assert!(DIMENSIONS_LIMIT <= u32::BITS as usize);

impl Charges {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Charges {
            present: 0,
            kept: [const { MaybeUninit::uninit() }; DIMENSIONS_LIMIT],
        }
    }

    /// Whether any charge is kept.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// Keeps what dimension `index` charged (replacing any charge it had): `units` of
    /// `entry`'s state at `at` (and wall time `wall`). Takes the parts, not a [`Charge`]:
    /// a whole one would be assembled on the stack first and copied.
    #[inline(always)]
    pub(crate) fn keep(
        &mut self,
        index: usize,
        kind: ChargeKind,
        entry: Arc<Entry>,
        units: u64,
        at: Nanos,
        wall: jiff::Timestamp,
    ) {
        assert!(index < DIMENSIONS_LIMIT, "dimension {index} out of range");
        drop(self.take(index));
        let slot = self.kept[index].as_mut_ptr();
        // SAFETY: `slot` points into `self.kept`, valid for writes, and holds no value
        // (taken just above); every field is written before the bit marks it present.
        unsafe {
            addr_of_mut!((*slot).kind).write(kind);
            addr_of_mut!((*slot).entry).write(entry);
            addr_of_mut!((*slot).units).write(units);
            addr_of_mut!((*slot).at).write(at);
            addr_of_mut!((*slot).wall).write(wall);
        }
        self.present |= 1 << index;
    }

    /// Dimension `index`'s charge, if one is kept; it is no longer kept.
    #[inline]
    pub(crate) fn take(&mut self, index: usize) -> Option<Charge> {
        let bit = 1u32.checked_shl(u32::try_from(index).ok()?)?;
        if self.present & bit == 0 {
            return None;
        }
        self.present &= !bit;
        // SAFETY: the bit was set, so `kept[index]` was fully written by `keep` and not
        // read out since; clearing the bit first hands the value over exactly once.
        Some(unsafe { self.kept[index].assume_init_read() })
    }
}

impl Drop for Charges {
    fn drop(&mut self) {
        while self.present != 0 {
            let index = self.present.trailing_zeros() as usize;
            drop(self.take(index));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::table::EntryState;

    fn entry() -> Arc<Entry> {
        let state = EntryState::InFlight {
            max: 1,
            count: Default::default(),
        };
        Arc::new(Entry::new("k".into(), 0, 0, state, Nanos(0)))
    }

    fn keep(charges: &mut Charges, index: usize, entry: &Arc<Entry>, units: u64) {
        let wall = jiff::Timestamp::UNIX_EPOCH;
        let entry = Arc::clone(entry);
        charges.keep(
            index,
            ChargeKind::InFlight,
            entry,
            units,
            Nanos(units),
            wall,
        );
    }

    #[test]
    fn keeps_each_dimension_apart_and_hands_each_out_once() {
        let e = entry();
        let mut charges = Charges::new();
        assert!(charges.is_empty());
        keep(&mut charges, 0, &e, 3);
        keep(&mut charges, 5, &e, 7);
        assert!(charges.take(1).is_none());
        assert_eq!(Arc::strong_count(&e), 3);
        let five = charges.take(5).expect("kept");
        assert_eq!((five.units, five.at), (7, Nanos(7)));
        assert!(charges.take(5).is_none(), "handed out once");
        assert!(charges.take(DIMENSIONS_LIMIT + 40).is_none());
        drop(five);
        assert_eq!(Arc::strong_count(&e), 2);
        assert!(matches!(
            charges.take(0).map(|c| c.kind),
            Some(ChargeKind::InFlight)
        ));
        assert!(charges.is_empty());
    }

    #[test]
    fn replacing_or_dropping_releases_the_entries() {
        let e = entry();
        let mut charges = Charges::new();
        keep(&mut charges, 1, &e, 1);
        keep(&mut charges, 1, &e, 2);
        assert_eq!(Arc::strong_count(&e), 2, "the replaced charge let go");
        assert_eq!(charges.take(1).map(|c| c.units), Some(2));
        keep(&mut charges, 2, &e, 4);
        keep(&mut charges, 7, &e, 4);
        drop(charges);
        assert_eq!(Arc::strong_count(&e), 1);
    }
}
