//! The per-dimension results of a decision, kept inline.
//!
//! A fixed array rather than a general small vector so that each result is written field
//! by field where it stays: built elsewhere and copied in, a result's fields are read back
//! in wider chunks than they were written, and each such read waits for the writes to
//! reach the cache (a store-forwarding stall costs more than the rest of the copy).

use super::decision::{DimensionResult, Outcome, PolicyId, DIMENSIONS_LIMIT};
use std::mem::MaybeUninit;

/// Results in request order; dereferences to a slice.
pub struct Results {
    len: usize,
    /// Whether any result may need dropping (a policy id too long to keep inline holds a
    /// reference): most decisions hold none, and clearing them is then one store.
    owning: bool,
    items: [MaybeUninit<DimensionResult>; DIMENSIONS_LIMIT],
}

/// The fields of one result, written in place by [`Results::push_parts`].
pub(crate) struct Parts<'p> {
    pub(crate) policy_id: Option<&'p PolicyId>,
    pub(crate) policy_version: u64,
    pub(crate) outcome: Outcome,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) reset_after_ns: u64,
}

impl Results {
    pub fn new() -> Self {
        Results {
            len: 0,
            owning: false,
            items: [const { MaybeUninit::uninit() }; DIMENSIONS_LIMIT],
        }
    }

    /// Appends `result`. The engine never gives more than [`DIMENSIONS_LIMIT`].
    ///
    /// # Panics
    /// When already full.
    pub fn push(&mut self, result: DimensionResult) {
        assert!(
            self.len < DIMENSIONS_LIMIT,
            "more than {DIMENSIONS_LIMIT} results"
        );
        self.owning |= result.policy_id.as_ref().is_some_and(PolicyId::is_shared);
        self.items[self.len].write(result);
        self.len += 1;
    }

    /// Appends a result written field by field into its place.
    #[inline]
    pub(crate) fn push_parts(&mut self, parts: Parts<'_>) {
        assert!(
            self.len < DIMENSIONS_LIMIT,
            "more than {DIMENSIONS_LIMIT} results"
        );
        if parts.policy_id.is_some_and(PolicyId::is_shared) {
            self.owning = true;
        }
        let slot = self.items[self.len].as_mut_ptr();
        // SAFETY: `slot` points to this array's unused element; every field is written
        // before `len` counts it as initialised.
        unsafe {
            std::ptr::addr_of_mut!((*slot).policy_id).write(parts.policy_id.cloned());
            std::ptr::addr_of_mut!((*slot).policy_version).write(parts.policy_version);
            std::ptr::addr_of_mut!((*slot).outcome).write(parts.outcome);
            std::ptr::addr_of_mut!((*slot).limit).write(parts.limit);
            std::ptr::addr_of_mut!((*slot).remaining).write(parts.remaining);
            std::ptr::addr_of_mut!((*slot).reset_after_ns).write(parts.reset_after_ns);
        }
        self.len += 1;
    }

    /// Sets result `index`'s outcome (a rollback), as a field no drop depends on.
    ///
    /// # Panics
    /// When there is no such result.
    pub(crate) fn set_outcome(&mut self, index: usize, outcome: Outcome) {
        assert!(index < self.len, "no result {index}");
        // SAFETY: the first `len` elements are initialised.
        unsafe { self.items[index].assume_init_mut().outcome = outcome };
    }

    /// Drops every result.
    #[inline]
    pub fn clear(&mut self) {
        let len = std::mem::replace(&mut self.len, 0);
        if !std::mem::replace(&mut self.owning, false) {
            return;
        }
        for item in &mut self.items[..len] {
            // SAFETY: the first `len` elements were initialised, and `len` is already 0,
            // so none is dropped twice even if a drop panics.
            unsafe { item.assume_init_drop() };
        }
    }
}

impl Default for Results {
    fn default() -> Self {
        Results::new()
    }
}

impl Drop for Results {
    #[inline]
    fn drop(&mut self) {
        self.clear();
    }
}

impl std::ops::Deref for Results {
    type Target = [DimensionResult];
    fn deref(&self) -> &[DimensionResult] {
        // SAFETY: the first `len` elements are initialised.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast(), self.len) }
    }
}

impl std::ops::DerefMut for Results {
    fn deref_mut(&mut self) -> &mut [DimensionResult] {
        // A result changed through the slice may be given an id that needs dropping.
        self.owning = true;
        // SAFETY: the first `len` elements are initialised.
        unsafe { std::slice::from_raw_parts_mut(self.items.as_mut_ptr().cast(), self.len) }
    }
}

impl Clone for Results {
    fn clone(&self) -> Self {
        let mut out = Results::new();
        for r in self.iter() {
            out.push(r.clone());
        }
        out
    }
}

impl std::fmt::Debug for Results {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Results {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Results {}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(limit: u64) -> DimensionResult {
        DimensionResult {
            policy_id: None,
            policy_version: 0,
            outcome: Outcome::Admitted,
            limit,
            remaining: 0,
            reset_after_ns: 0,
        }
    }

    #[test]
    fn keeps_results_in_order_and_drops_them() {
        let mut r = Results::new();
        r.push(result(1));
        let id = PolicyId::new(&std::sync::Arc::from("a-policy-id-too-long-to-be-inline"));
        r.push_parts(Parts {
            policy_id: Some(&id),
            policy_version: 3,
            outcome: Outcome::Denied(super::super::DenyReason::OverLimit),
            limit: 2,
            remaining: 0,
            reset_after_ns: 7,
        });
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].limit, 1);
        assert_eq!(r[1].policy_id.as_deref(), Some(&*id));
        assert_eq!(r[1].reset_after_ns, 7);
        let copy = r.clone();
        assert_eq!(copy, r);
        r.clear();
        assert!(r.is_empty());
        assert_eq!(copy.len(), 2, "the copy owns its results");
    }

    /// Ids too long to keep inline hold a reference, which clearing gives back however
    /// they came in; inline ids hold none.
    #[test]
    fn clearing_releases_shared_ids() {
        let long: std::sync::Arc<str> = std::sync::Arc::from("a-policy-id-too-long-to-be-inline");
        let id = PolicyId::new(&long);
        let held = || std::sync::Arc::strong_count(&long);
        let parts = |policy_id| Parts {
            policy_id,
            policy_version: 1,
            outcome: Outcome::Admitted,
            limit: 1,
            remaining: 0,
            reset_after_ns: 0,
        };
        let mut r = Results::new();
        r.push_parts(parts(Some(&id)));
        assert_eq!(held(), 3);
        r.clear();
        assert_eq!(held(), 2, "written in place");

        r.push(result(1));
        r.push(DimensionResult {
            policy_id: Some(id.clone()),
            ..result(2)
        });
        r.clear();
        assert_eq!(held(), 2, "pushed whole");

        r.push(result(1));
        r.clear();
        r.push(result(1));
        r[0].policy_id = Some(id.clone());
        r.set_outcome(0, Outcome::RolledBack);
        assert_eq!(r[0].outcome, Outcome::RolledBack);
        r.clear();
        assert_eq!(held(), 2, "set through the slice");

        let short = PolicyId::new(&std::sync::Arc::from("short"));
        assert!(!short.is_shared() && id.is_shared());
    }

    #[test]
    #[should_panic(expected = "more than")]
    fn refuses_more_than_the_limit() {
        let mut r = Results::new();
        for i in 0..=DIMENSIONS_LIMIT as u64 {
            r.push(result(i));
        }
    }
}
