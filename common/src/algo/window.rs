//! What the fixed and the sliding window counters share: configuration checks, where a
//! window starts, moving to a later window, and returning units to the window they were
//! charged in.
//!
//! Both counters keep a count per aligned window `[k·W, (k+1)·W)`: the fixed window one
//! (the current window), the sliding window two (the current one and the one before).
//! Here those counts are passed newest first, so `counts[age]` belongs to window
//! `index − age`.

use super::Decision;
use crate::time::Nanos;
use thiserror::Error;

/// Why a window configuration was refused (shared by the fixed and sliding windows).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum WindowError {
    #[error("window limit must be positive (limit = 0)")]
    ZeroLimit,
    #[error("window length must be positive (window_ns = 0)")]
    ZeroWindow,
}

pub(super) fn validate(limit: u64, window_ns: u64) -> Result<(), WindowError> {
    if limit == 0 {
        return Err(WindowError::ZeroLimit);
    }
    if window_ns == 0 {
        return Err(WindowError::ZeroWindow);
    }
    Ok(())
}

/// Nanoseconds from `now` to the start of window `index`; `u64::MAX` (never) if that start
/// lies beyond the end of the timeline.
pub(super) fn ns_until_window(index: u128, window_ns: u64, now: Nanos) -> u64 {
    match u64::try_from(index * u128::from(window_ns)) {
        Ok(start) => start.saturating_sub(now.0),
        Err(_) => u64::MAX,
    }
}

/// Clamps `now` to the latest time seen (P3: a clock step backwards never reopens or
/// slides a window), records it as the latest, and returns it.
pub(super) fn observe(last: &mut Nanos, now: Nanos) -> Nanos {
    let now = now.max(*last);
    *last = now;
    now
}

/// Moves `counts` (newest first) from window `*index` to window `to`: each window passed
/// makes every count one window older, counts older than the slots kept are dropped, and
/// the new windows start from zero. Any `to` other than a later window starts everything
/// from zero.
pub(super) fn roll<const N: usize>(counts: [&mut u64; N], index: &mut u64, to: u64) {
    // At least 1 when the index moves at all; `N` or more clears every slot.
    let steps = match to.checked_sub(*index) {
        Some(0) => return,
        Some(steps) => usize::try_from(steps).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    let old: [u64; N] = std::array::from_fn(|age| *counts[age]);
    for (age, count) in counts.into_iter().enumerate() {
        *count = age.checked_sub(steps).map_or(0, |from| old[from]);
    }
    *index = to;
}

/// Returns up to `cost` units to the count of window `charged`, if that window is still
/// kept (it is `index` or one of the `N − 1` before it); older charges no longer count.
pub(super) fn refund<const N: usize>(counts: [&mut u64; N], index: u64, charged: u64, cost: u64) {
    let Some(age) = index.checked_sub(charged) else {
        return;
    };
    if let Some(count) = usize::try_from(age)
        .ok()
        .and_then(|age| counts.into_iter().nth(age))
    {
        *count -= cost.min(*count);
    }
}

/// Admits `cost` when it fits in `remaining`, leaving the charge to the caller; otherwise
/// denies with `retry_after_ns()` as the wait, or never when `cost` exceeds `limit`.
pub(super) fn decide(
    limit: u64,
    remaining: u64,
    cost: u64,
    retry_after_ns: impl FnOnce() -> u64,
) -> Decision {
    if cost <= remaining {
        return Decision::Admit {
            remaining: remaining - cost,
        };
    }
    let retry_after_ns = if cost > limit {
        u64::MAX
    } else {
        retry_after_ns()
    };
    Decision::Deny {
        remaining,
        retry_after_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roll_shifts_counts_by_the_windows_passed() {
        let (mut current, mut previous, mut index) = (5, 7, 10);
        roll([&mut current, &mut previous], &mut index, 10);
        assert_eq!((current, previous, index), (5, 7, 10), "same window");
        roll([&mut current, &mut previous], &mut index, 11);
        assert_eq!((current, previous, index), (0, 5, 11), "next window");
        current = 3;
        roll([&mut current, &mut previous], &mut index, 13);
        assert_eq!((current, previous, index), (0, 0, 13), "two windows on");
        current = 4;
        roll([&mut current, &mut previous], &mut index, u64::MAX);
        assert_eq!((current, previous, index), (0, 0, u64::MAX));
        current = 2;
        roll([&mut current, &mut previous], &mut index, u64::MAX);
        assert_eq!((current, previous), (2, 0), "the last window stays put");
    }

    #[test]
    fn refund_reaches_only_the_windows_kept() {
        let (mut current, mut previous) = (5, 7);
        refund([&mut current, &mut previous], 10, 10, 2);
        refund([&mut current, &mut previous], 10, 9, 9);
        assert_eq!((current, previous), (3, 0), "capped at what was counted");
        refund([&mut current, &mut previous], 10, 8, 1);
        refund([&mut current, &mut previous], 10, 11, 1);
        assert_eq!((current, previous), (3, 0), "too old, or not yet a window");
    }

    #[test]
    fn decide_denies_above_the_limit_for_ever() {
        assert_eq!(decide(10, 4, 4, || 1), Decision::Admit { remaining: 0 });
        let deny = |retry_after_ns| Decision::Deny {
            remaining: 4,
            retry_after_ns,
        };
        assert_eq!(decide(10, 4, 5, || 123), deny(123));
        assert_eq!(decide(10, 4, 11, || 123), deny(u64::MAX));
    }
}
