//! Admission algorithms over exact integer arithmetic.
//!
//! Each algorithm is a small state value updated with an explicit time. A time earlier than
//! the state's last update is treated as no elapsed time (P3): no algorithm refills,
//! rewinds a window, or forgets a charge because the clock stepped back.

pub mod calendar;
pub mod calendar_period;
pub mod fixed_window;
pub mod gcra;
pub mod shape;
pub mod sliding_window;
pub mod token_bucket;
mod window;

pub use calendar::CalendarQuota;
pub use calendar_period::{CalendarError, CalendarPeriod, CalendarSchedule};
pub use fixed_window::FixedWindow;
pub use gcra::{Gcra, GcraError};
pub use shape::{take_shaped, Shaped, Timeline};
pub use sliding_window::SlidingWindow;
pub use token_bucket::TokenBucket;
pub use window::WindowError;

use crate::time::Nanos;

/// Outcome of offering `cost` units to an algorithm.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Charged; `remaining` whole units are left right after this charge.
    Admit { remaining: u64 },
    /// Not charged; the same cost could be admitted after `retry_after_ns` if nothing else
    /// spends meanwhile (`u64::MAX` when it never can, e.g. cost above the burst).
    Deny { remaining: u64, retry_after_ns: u64 },
}

impl Decision {
    pub fn is_admit(&self) -> bool {
        matches!(self, Decision::Admit { .. })
    }

    pub fn remaining(&self) -> u64 {
        match *self {
            Decision::Admit { remaining } | Decision::Deny { remaining, .. } => remaining,
        }
    }
}

/// The common face of every admission algorithm.
pub trait Limiter {
    /// Charges `cost` at `now` if the limit allows it; otherwise changes nothing.
    fn try_take(&mut self, cost: u64, now: Nanos) -> Decision;
    /// Returns units charged by an earlier admit that was rolled back (a multi-dimensional
    /// admission that failed on another dimension). Never raises credit above what the
    /// algorithm held before the charge.
    fn refund(&mut self, cost: u64, charged_at: Nanos);
}
