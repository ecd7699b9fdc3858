//! Clocks of the simulated hosts: tokio's virtual time, shifted by an offset the fault
//! schedule changes, so a host's clock can step back or forward while the run goes on.

use leasehold_common::time::{Clock, Nanos, TokioClock};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Simulated time since the start of the run, in nanoseconds, as the simulation's logs
/// record it (zero outside a simulation).
pub(crate) fn sim_now_ns() -> u64 {
    let at = turmoil::sim_elapsed().unwrap_or_default();
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

/// Largest clock offset a host may be given, in milliseconds either way.
pub const CLOCK_OFFSET_MS_MAX: u64 = 600_000;

/// How far each agent host's clocks are off the simulation's, in nanoseconds (negative:
/// behind). The run changes them between steps; the hosts read them on every clock reading.
/// They belong to the host, not its software, so they survive a crash and restart.
#[derive(Clone, Debug, Default)]
pub struct ClockOffsets {
    offsets_ns: Arc<Vec<AtomicI64>>,
}

impl ClockOffsets {
    /// Zero offsets for `hosts` hosts.
    pub fn new(hosts: usize) -> Self {
        ClockOffsets {
            offsets_ns: Arc::new((0..hosts).map(|_| AtomicI64::new(0)).collect()),
        }
    }

    /// Sets host `host`'s offset to `offset_ms`, clamped to ±[`CLOCK_OFFSET_MS_MAX`].
    /// Returns false if there is no such host.
    pub fn set_ms(&self, host: usize, offset_ms: i64) -> bool {
        let limit = CLOCK_OFFSET_MS_MAX as i64;
        let ns = offset_ms.clamp(-limit, limit) * 1_000_000;
        match self.offsets_ns.get(host) {
            Some(o) => {
                o.store(ns, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// Host `host`'s offset in nanoseconds; zero for an unknown host.
    pub fn get_ns(&self, host: usize) -> i64 {
        self.offsets_ns
            .get(host)
            .map_or(0, |o| o.load(Ordering::SeqCst))
    }

    /// The monotonic clock of host `host`, as its software reads it.
    pub fn clock(&self, host: usize) -> SteppedClock {
        SteppedClock {
            inner: TokioClock::new(),
            offsets: self.clone(),
            host,
            monotonic_steps: true,
        }
    }
}

/// A [`TokioClock`] plus the host's current offset: a raw clock that steps when the offset
/// changes, as a badly behaved host clock would. Readings saturate at zero and `u64::MAX`.
#[derive(Clone, Debug)]
pub struct SteppedClock {
    inner: TokioClock,
    offsets: ClockOffsets,
    host: usize,
    /// Whether [`Clock::now`] steps with the offset; [`SteppedClock::shift`] always does.
    monotonic_steps: bool,
}

impl SteppedClock {
    /// This clock with a monotonic reading that ignores the host's offset, as a real host's
    /// monotonic clock would; only [`SteppedClock::shift`] (the wall clock) still steps.
    pub fn steady(self) -> Self {
        SteppedClock {
            monotonic_steps: false,
            ..self
        }
    }

    /// `ns` shifted by this host's offset, saturating.
    pub fn shift(&self, ns: u64) -> u64 {
        let offset = self.offsets.get_ns(self.host);
        if offset < 0 {
            ns.saturating_sub(offset.unsigned_abs())
        } else {
            ns.saturating_add(offset.unsigned_abs())
        }
    }
}

impl Clock for SteppedClock {
    fn now(&self) -> Nanos {
        let raw = self.inner.now();
        if self.monotonic_steps {
            Nanos(self.shift(raw.0))
        } else {
            raw
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_steps_with_its_hosts_offset_only() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let offsets = ClockOffsets::new(2);
            let (a, b) = (offsets.clock(0), offsets.clock(1));
            tokio::time::advance(std::time::Duration::from_secs(5)).await;
            assert_eq!(a.now(), Nanos::from_secs(5));
            assert!(offsets.set_ms(0, -3_000));
            assert_eq!(a.now(), Nanos::from_secs(2));
            assert_eq!(b.now(), Nanos::from_secs(5));
            assert!(offsets.set_ms(0, -9_000));
            assert_eq!(a.now(), Nanos::ZERO, "saturates at zero");
            assert!(offsets.set_ms(0, 2_000));
            assert_eq!(a.now(), Nanos::from_secs(7));
            let steady = a.clone().steady();
            assert_eq!(
                steady.now(),
                Nanos::from_secs(5),
                "a steady clock ignores it"
            );
            assert_eq!(steady.shift(0), 2_000_000_000, "its wall clock does not");
            assert!(!offsets.set_ms(2, 1));
            assert!(offsets.set_ms(1, i64::MIN));
            assert_eq!(offsets.get_ns(1), -(CLOCK_OFFSET_MS_MAX as i64) * 1_000_000);
        });
    }
}
