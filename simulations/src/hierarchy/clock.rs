//! A participant's own clock: the simulated true time plus an offset that a fault can step
//! backwards, read through a guard that keeps decisions on a timeline that never runs back.

use leasehold_common::time::{ClockGuard, Nanos};

/// One participant's clock. Raw readings are `true time + offset`; a backward step is
/// detected (a reading below the previous one) and added back, so the corrected timeline
/// keeps pace with true time instead of stalling (it lags by at most the interval between two
/// readings), and the guard forbids any residual step back. A stall for the whole step would
/// keep lease deadlines alive longer than the grantor allows.
#[derive(Clone, Debug)]
pub struct SimClock {
    /// Raw reading minus true time, in nanoseconds (negative after a step back).
    offset_ns: i128,
    /// Raw readings are signed so a step back past the origin is still seen in full.
    raw_prev_ns: i128,
    /// Sum of detected backward steps, added to every raw reading.
    shift_ns: i128,
    guard: ClockGuard,
    steps_back: u64,
    /// Whether detected steps are added back; without it the guard stalls through a step.
    corrects: bool,
}

impl Default for SimClock {
    fn default() -> Self {
        SimClock {
            offset_ns: 0,
            raw_prev_ns: 0,
            shift_ns: 0,
            guard: ClockGuard::new(Nanos::ZERO),
            steps_back: 0,
            corrects: true,
        }
    }
}

impl SimClock {
    /// A clock read through the guard alone: a step back is clamped, so the timeline
    /// stalls until the raw clock catches up. Kept to show why that is not enough.
    pub fn guard_only() -> Self {
        SimClock {
            corrects: false,
            ..SimClock::default()
        }
    }

    /// Moves the raw clock back by `back_ns` (a wall-clock step or a misbehaving source).
    pub fn step_back(&mut self, back_ns: u64) {
        self.offset_ns -= i128::from(back_ns);
    }

    /// The corrected, never-decreasing reading at `true_ns`.
    pub fn read(&mut self, true_ns: u64) -> Nanos {
        let raw = i128::from(true_ns) + self.offset_ns;
        if raw < self.raw_prev_ns {
            if self.corrects {
                self.shift_ns += self.raw_prev_ns - raw;
            }
            self.steps_back += 1;
        }
        self.raw_prev_ns = raw;
        // Detected steps are added back in full, so the corrected reading is not negative.
        let corrected = u64::try_from(raw + self.shift_ns).unwrap_or(0);
        self.guard.observe(Nanos(corrected))
    }

    /// Backward steps detected so far.
    pub fn steps_back(&self) -> u64 {
        self.steps_back
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_back_neither_stalls_nor_reverses_the_timeline() {
        let mut c = SimClock::default();
        assert_eq!(c.read(1_000), Nanos(1_000));
        c.step_back(700);
        // The step is detected at the next reading and added back; only the time between
        // the two readings is lost, never the step itself.
        assert_eq!(c.read(1_100), Nanos(1_000));
        assert_eq!(c.read(2_000), Nanos(1_900));
        assert_eq!(c.steps_back(), 1);
    }

    #[test]
    fn the_guard_alone_stalls_through_a_step_back() {
        let mut c = SimClock::guard_only();
        assert_eq!(c.read(1_000), Nanos(1_000));
        c.step_back(700);
        assert_eq!(c.read(1_100), Nanos(1_000));
        assert_eq!(c.read(1_650), Nanos(1_000));
        assert_eq!(c.read(2_000), Nanos(1_300));
    }

    #[test]
    fn a_step_back_past_the_origin_is_seen_in_full() {
        let mut c = SimClock::default();
        assert_eq!(c.read(3_000), Nanos(3_000));
        c.step_back(10_000);
        assert_eq!(c.read(3_010), Nanos(3_000));
        assert_eq!(c.read(4_000), Nanos(3_990));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4_000))]

        /// Whatever steps back happen between readings, the corrected timeline never runs
        /// back, never gets ahead of true time, and lags it by at most the time between
        /// the readings that saw a step (so a deadline is never pushed out further).
        #[test]
        fn corrected_time_is_monotone_and_never_ahead(
            events in proptest::collection::vec(
                (1u64..50_000_000, proptest::option::of(1u64..20_000_000_000)),
                1..100,
            )
        ) {
            let mut c = SimClock::default();
            let (mut true_ns, mut prev, mut lag_allowed) = (0u64, Nanos::ZERO, 0u64);
            for (advance, back) in events {
                if let Some(back) = back {
                    c.step_back(back);
                    lag_allowed += advance;
                }
                true_ns += advance;
                let t = c.read(true_ns);
                proptest::prop_assert!(t >= prev);
                proptest::prop_assert!(t.0 <= true_ns);
                proptest::prop_assert!(true_ns - t.0 <= lag_allowed);
                prev = t;
            }
        }
    }
}
