//! What the dimensions of one request charged, kept until the request is decided: a later
//! dimension's refusal undoes them, and concurrency units stay held while it runs.
//!
//! A charge is written into its place field by field. Built as one value first, it is
//! assembled on the stack in pieces and copied in with wide reads, and a wide read of
//! pieces stored just before waits for them to reach the cache (a store-forwarding stall
//! that cost a tenth of a three-dimension decision).
//!
//! A charge mostly refers to its key's entry without a reference count of its own: taking
//! and dropping one is an atomic read-modify-write each, on a line every thread deciding
//! for the key writes, and together they cost a fifth of a three-dimension decision. That
//! is sound for entries the deciding thread keeps alive until the request ends (its key
//! cache, which holds entries displaced during a request of several dimensions until it
//! ends, or the rule set it holds), and a charge never outlives its request.

use super::decision::DIMENSIONS_LIMIT;
use super::table::Entry;
use crate::credit::SpendTicket;
use leasehold_common::time::Nanos;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::ptr::{addr_of_mut, NonNull};
use std::sync::Arc;

/// A key's entry as a dimension check found it, and whether this thread keeps it alive
/// until the request ends.
#[derive(Copy, Clone)]
pub(crate) struct Found<'a> {
    entry: &'a Arc<Entry>,
    held: bool,
}

impl<'a> Found<'a> {
    /// An entry this thread keeps no reference to beyond `'a`.
    pub(crate) fn shared(entry: &'a Arc<Entry>) -> Self {
        Found { entry, held: false }
    }

    /// An entry kept alive until the request ends by this thread's key cache or the rule
    /// set it holds.
    ///
    /// # Safety
    /// The entry must stay alive until the request being decided ends: charges to it
    /// refer to it without a count of their own.
    pub(crate) unsafe fn held(entry: &'a Arc<Entry>) -> Self {
        Found { entry, held: true }
    }
}

impl Deref for Found<'_> {
    type Target = Arc<Entry>;
    fn deref(&self) -> &Arc<Entry> {
        self.entry
    }
}

/// The entry a charge was made to: counted (as an `Arc` is) or not, if the thread
/// deciding keeps it alive until the request ends ([`Found::held`]). Two plain fields,
/// written one by one into a charge's place (an enum is assembled on the stack and copied
/// in with a wide read that waits for its halves' stores).
pub(crate) struct EntryRef {
    entry: NonNull<Entry>,
    counted: bool,
}

impl EntryRef {
    /// A reference to `found` for a charge that lasts no longer than its request.
    #[inline(always)]
    pub(crate) fn to(found: Found<'_>) -> Self {
        let counted = !found.held;
        if counted {
            std::mem::forget(Arc::clone(found.entry));
        }
        EntryRef {
            entry: NonNull::from(&**found.entry),
            counted,
        }
    }

    pub(crate) fn get(&self) -> &Entry {
        // SAFETY: the entry is counted by this reference, or it was found held, and its
        // thread keeps it alive until the request ends, which no charge outlives.
        unsafe { self.entry.as_ref() }
    }

    /// A counted reference, to keep the entry past the request.
    pub(crate) fn into_arc(self) -> Arc<Entry> {
        let this = std::mem::ManuallyDrop::new(self);
        let entry = this.entry.as_ptr().cast_const();
        // SAFETY: the entry is alive (as in `get`) and was allocated by an `Arc` (a `Found`
        // refers to an `Arc<Entry>`). The returned `Arc` takes over this reference's count,
        // or a new one taken here; `this` is not dropped, so no count is given back twice.
        unsafe {
            if !this.counted {
                Arc::increment_strong_count(entry);
            }
            Arc::from_raw(entry)
        }
    }
}

impl Drop for EntryRef {
    fn drop(&mut self) {
        if self.counted {
            // SAFETY: this reference holds one count of an `Arc`-allocated entry (taken in
            // `to`), given back exactly once here.
            unsafe { drop(Arc::from_raw(self.entry.as_ptr().cast_const())) }
        }
    }
}

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
    pub(crate) entry: EntryRef,
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
        entry: EntryRef,
        units: u64,
        at: Nanos,
        wall: jiff::Timestamp,
    ) {
        assert!(index < DIMENSIONS_LIMIT, "dimension {index} out of range");
        if self.present & (1 << index) != 0 {
            self.forget(index);
        }
        let slot = self.kept[index].as_mut_ptr();
        // SAFETY: `slot` points into `self.kept`, valid for writes, and holds no value
        // (any earlier charge of this dimension was dropped just above); every field is
        // written before the bit marks it present.
        unsafe {
            addr_of_mut!((*slot).kind).write(kind);
            // Moved field by field: its count, if any, goes with them.
            let entry = std::mem::ManuallyDrop::new(entry);
            addr_of_mut!((*slot).entry.entry).write(entry.entry);
            addr_of_mut!((*slot).entry.counted).write(entry.counted);
            addr_of_mut!((*slot).units).write(units);
            addr_of_mut!((*slot).at).write(at);
            addr_of_mut!((*slot).wall).write(wall);
        }
        self.present |= 1 << index;
    }

    /// Drops the charge kept for dimension `index` (a dimension charges once; this is
    /// only the safe answer to a second charge).
    #[cold]
    fn forget(&mut self, index: usize) {
        drop(self.take(index));
    }

    /// Dimension `index`'s charge, if one is kept; it is no longer kept.
    #[inline]
    pub(crate) fn take(&mut self, index: usize) -> Option<Charge> {
        if index >= DIMENSIONS_LIMIT {
            return None;
        }
        let bit = 1u32 << index;
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

/// A request's charges to one key's entry, with only the operations the loom model of
/// charge references needs (`tests/loom_undo.rs`): the entry's type stays private.
#[cfg(leasehold_loom)]
pub mod model {
    use super::*;
    use crate::engine::table::EntryState;
    use std::sync::Weak;

    /// The key table's reference to an entry with a concurrency limit.
    pub struct TableEntry(Arc<Entry>);

    /// Tells whether an entry is still allocated, without keeping it.
    pub struct Watch(Weak<Entry>);

    /// One request: its charges, and the entries its thread keeps alive until it ends (as
    /// the thread's key cache does for entries charged without a count).
    pub struct Request {
        charges: Charges,
        kept_alive: Vec<Arc<Entry>>,
    }

    /// A concurrency unit kept past its request through a counted reference.
    pub struct Unit(Arc<Entry>);

    impl TableEntry {
        pub fn new(max: u64) -> Self {
            let state = EntryState::InFlight {
                max,
                count: Default::default(),
            };
            TableEntry(Arc::new(Entry::new("k".into(), 0, 0, state, Nanos(0))))
        }

        pub fn watch(&self) -> Watch {
            Watch(Arc::downgrade(&self.0))
        }
    }

    impl Watch {
        pub fn alive(&self) -> bool {
            self.0.strong_count() > 0
        }
    }

    impl Request {
        pub fn new() -> Self {
            Request {
                charges: Charges::new(),
                kept_alive: Vec::new(),
            }
        }

        /// Takes `units` of `entry`'s concurrency limit for dimension `index`, referring to
        /// the entry without a count of its own when `held`. False if they do not fit.
        pub fn charge(&mut self, entry: &TableEntry, index: usize, units: u64, held: bool) -> bool {
            if entry.0.acquire_in_flight(units).is_err() {
                return false;
            }
            let found = if held {
                self.kept_alive.push(Arc::clone(&entry.0));
                // SAFETY: `kept_alive` holds the entry until the request is dropped, after
                // its charges (declared first, so dropped first).
                unsafe { Found::held(&entry.0) }
            } else {
                Found::shared(&entry.0)
            };
            let wall = jiff::Timestamp::UNIX_EPOCH;
            let entry = EntryRef::to(found);
            self.charges
                .keep(index, ChargeKind::InFlight, entry, units, Nanos(0), wall);
            true
        }

        /// Reads the entry dimension `index` charged, through the charge's reference.
        pub fn key_of(&self, index: usize) -> Option<String> {
            let bit = 1u32 << index;
            if index >= DIMENSIONS_LIMIT || self.charges.present & bit == 0 {
                return None;
            }
            // SAFETY: the bit is set, so the charge was written by `keep` and is still kept.
            let charge = unsafe { self.charges.kept[index].assume_init_ref() };
            Some(charge.entry.get().key().to_owned())
        }

        /// Undoes dimension `index`'s charge, as a later dimension's refusal does.
        pub fn undo(&mut self, index: usize) -> bool {
            let Some(charge) = self.charges.take(index) else {
                return false;
            };
            charge.entry.get().release_in_flight(charge.units);
            true
        }

        /// Keeps dimension `index`'s units past the request, as an admitted request's
        /// concurrency units are.
        pub fn keep_unit(&mut self, index: usize) -> Option<Unit> {
            Some(Unit(self.charges.take(index)?.entry.into_arc()))
        }
    }

    impl Default for Request {
        fn default() -> Self {
            Request::new()
        }
    }

    impl Unit {
        /// Gives the unit back when the request's work ends.
        pub fn release(self) {
            self.0.release_in_flight(1);
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
        let entry = EntryRef::to(Found::shared(entry));
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

    /// A charge to an entry its thread holds takes no count, and one taken out to keep
    /// past the request (a concurrency unit) counts as its own.
    #[test]
    fn held_entries_are_charged_without_a_count() {
        let e = entry();
        let mut charges = Charges::new();
        // SAFETY: `e` outlives `charges` and everything taken out of it.
        let found = unsafe { Found::held(&e) };
        let wall = jiff::Timestamp::UNIX_EPOCH;
        charges.keep(0, ChargeKind::Local, EntryRef::to(found), 2, Nanos(1), wall);
        assert_eq!(Arc::strong_count(&e), 1);
        let charge = charges.take(0).expect("kept");
        assert!(std::ptr::eq(charge.entry.get(), &*e));
        let kept = charge.entry.into_arc();
        assert!(Arc::ptr_eq(&kept, &e));
        assert_eq!(Arc::strong_count(&e), 2);
        drop(kept);
        assert_eq!(Arc::strong_count(&e), 1);
    }
}
