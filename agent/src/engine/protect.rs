//! The engine's self-protection: a per-instance limit on decisions, independent of leases.
//!
//! Leases bound what tenants may spend; this bounds the work this process takes on at all,
//! so a flood that would be refused anyway cannot exhaust the process first. It is a GCRA
//! kept in one atomic (the theoretical arrival time), so threads never wait on a lock.

use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};

/// Self-protection settings: `rate` decisions sustained, `burst` at once.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SelfProtection {
    pub rate: Rate,
    pub burst: u64,
}

#[derive(Debug)]
pub(crate) struct Protector {
    /// Nanoseconds per decision, rounded up: the sustained rate is never above the
    /// configured one.
    interval_ns: u64,
    /// How far ahead of now the arrival time may run: the burst.
    tolerance_ns: u64,
    tat_ns: AtomicU64,
}

impl Protector {
    pub(crate) fn new(settings: SelfProtection, now: Nanos) -> Protector {
        let interval_ns = settings.rate.ns_per_unit_ceil().max(1);
        Protector {
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(settings.burst.max(1)),
            tat_ns: AtomicU64::new(now.0),
        }
    }

    /// Takes one decision's worth at `now`; when the bucket is empty, the nanoseconds
    /// until it holds one again.
    #[inline]
    pub(crate) fn try_take(&self, now: Nanos) -> Result<(), u64> {
        let mut tat = self.tat_ns.load(Ordering::Acquire);
        loop {
            let next = tat.max(now.0).saturating_add(self.interval_ns);
            if next - now.0 > self.tolerance_ns {
                return Err(next - now.0 - self.tolerance_ns);
            }
            match self
                .tat_ns
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(actual) => tat = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_burst_then_rate() {
        let p = Protector::new(
            SelfProtection {
                rate: Rate::per_second(10).unwrap(),
                burst: 3,
            },
            Nanos(0),
        );
        assert!((0..3).all(|_| p.try_take(Nanos(0)).is_ok()));
        assert_eq!(p.try_take(Nanos(0)), Err(100_000_000));
        assert_eq!(p.try_take(Nanos(99_999_999)), Err(1));
        assert_eq!(p.try_take(Nanos(100_000_000)), Ok(()));
        assert!(p.try_take(Nanos(100_000_000)).is_err());
    }
}
