//! Shaped takes against each algorithm's bound, over departure times.
//!
//! Random arrival schedules (bursts at one instant, gaps shorter and longer than a unit's
//! refill, occasional backward clock steps, weighted costs, a random waiting cap) are fed
//! to [`take_shaped`]. For every admitted request the departure `now + delay_ns` is
//! recorded; the units departing in any interval must stay within the algorithm's bound for
//! that interval, no delay may exceed `max_delay_ns`, departures from one limiter never go
//! back in time, and every refusal must leave the limiter exactly as it was.

use leasehold_common::algo::{
    take_shaped, FixedWindow, Gcra, Limiter, Shaped, SlidingWindow, Timeline, TokenBucket,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;
use std::fmt::Debug;

#[derive(Clone, Debug)]
struct Arrival {
    back: bool,
    gap_kind: u8,
    gap_raw: u64,
    cost_raw: u64,
}

fn arrivals() -> impl Strategy<Value = Vec<Arrival>> {
    let one = (
        prop::bool::weighted(0.05),
        0u8..5,
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(back, gap_kind, gap_raw, cost_raw)| Arrival {
            back,
            gap_kind,
            gap_raw,
            cost_raw,
        });
    prop::collection::vec(one, 1..150)
}

impl Arrival {
    fn gap_ns(&self, step_ns: u64) -> u64 {
        let span = match self.gap_kind {
            0 | 1 => return 0,
            2 => step_ns / 3,
            3 => step_ns.saturating_mul(2),
            _ => step_ns.saturating_mul(20),
        };
        self.gap_raw % span.saturating_add(1)
    }

    /// Mostly one unit, sometimes more, rarely above the capacity.
    fn cost(&self, capacity: u64) -> u64 {
        match self.cost_raw % 8 {
            0..=4 => 1,
            5 | 6 => 1 + (self.cost_raw >> 8) % capacity,
            _ => (self.cost_raw >> 8) % (capacity + 3),
        }
    }
}

/// Runs `arr` through shaped takes; returns the admitted `(departure, cost)` pairs after
/// checking the delay bound, the waiting cap and that refusals change nothing.
fn run<L: Limiter + Timeline + Clone + PartialEq + Debug>(
    lim: &mut L,
    start: u64,
    arr: &[Arrival],
    step_ns: u64,
    capacity: u64,
    (max_delay_ns, waiting_max): (u64, usize),
) -> Vec<(Nanos, u64)> {
    let mut departed: Vec<(Nanos, u64)> = Vec::new();
    let mut waiting: Vec<Nanos> = Vec::new();
    let mut raw = start;
    for a in arr {
        let gap = a.gap_ns(step_ns);
        raw = if a.back {
            raw.saturating_sub(gap)
        } else {
            raw.saturating_add(gap)
        };
        let (now, cost) = (Nanos(raw), a.cost(capacity));
        waiting.retain(|&d| d > now);
        let before = lim.clone();
        let free = waiting.len() < waiting_max;
        let mut asked = false;
        let shaped = take_shaped(lim, cost, now, max_delay_ns, |_| {
            asked = true;
            free
        });
        match shaped {
            Shaped::Admit { delay_ns, .. } => {
                assert!(
                    delay_ns <= max_delay_ns,
                    "delay {delay_ns} ns above {max_delay_ns}"
                );
                assert!(delay_ns == 0 || (asked && free), "waited without a slot");
                let departure = now.saturating_add_ns(delay_ns);
                if delay_ns > 0 {
                    waiting.push(departure);
                }
                if let Some(&(last, _)) = departed.last() {
                    assert!(departure >= last, "departures went back in time");
                }
                departed.push((departure, cost));
            }
            Shaped::Deny { waiting_full, .. } => {
                assert_eq!(*lim, before, "a refusal changed the limiter");
                assert!(!waiting_full || (asked && !free));
            }
        }
        assert!(waiting.len() <= waiting_max);
    }
    departed
}

/// `sum(i..=j) ≤ bound(t_j − t_i)` for every pair of departures.
fn check_every_window(departed: &[(Nanos, u64)], bound: impl Fn(u64) -> u128) {
    let mut prefix = vec![0u128];
    for &(_, cost) in departed {
        prefix.push(prefix.last().unwrap() + u128::from(cost));
    }
    for i in 0..departed.len() {
        for j in i..departed.len() {
            let t_ns = departed[j].0.saturating_since(departed[i].0);
            let sum = prefix[j + 1] - prefix[i];
            assert!(
                sum <= bound(t_ns),
                "{sum} units depart in [{:?}, {:?}] (T = {t_ns} ns), bound {}",
                departed[i].0,
                departed[j].0,
                bound(t_ns)
            );
        }
    }
}

fn bucket_config() -> impl Strategy<Value = (Rate, u64, u64)> {
    (
        1u64..=20,
        1_000u64..=2_000_000_000,
        1u64..=30,
        0u64..1_000_000_000_000,
    )
        .prop_map(|(units, period_ns, burst, start)| {
            (Rate::new(units, period_ns).unwrap(), burst, start)
        })
}

/// A bound up to four refill periods long, so delays are both inside and beyond it, and a
/// waiting cap from none to plenty.
fn shaping(step_ns: u64) -> impl Strategy<Value = (u64, usize)> {
    (0u64..=4 * step_ns, 0usize..8)
}

fn step_of(rate: Rate) -> u64 {
    rate.ns_per_unit_ceil().max(1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn shaped_token_bucket_departs_within_burst_plus_rate(
        ((rate, burst, start), shape) in bucket_config().prop_flat_map(|c| (Just(c), shaping(step_of(c.0)))),
        arr in arrivals(),
    ) {
        let mut b = TokenBucket::full(rate, burst, Nanos(start));
        let departed = run(&mut b, start, &arr, step_of(rate), burst, shape);
        check_every_window(&departed, |t| u128::from(burst) + u128::from(rate.units_in(t)));
    }

    #[test]
    fn shaped_gcra_departs_within_burst_plus_rate(
        ((rate, burst, start), shape) in bucket_config().prop_flat_map(|c| (Just(c), shaping(step_of(c.0)))),
        arr in arrivals(),
    ) {
        let mut g = Gcra::full(rate, burst, Nanos(start)).unwrap();
        let departed = run(&mut g, start, &arr, step_of(rate), burst, shape);
        check_every_window(&departed, |t| u128::from(burst) + u128::from(rate.units_in(t)));
    }

    #[test]
    fn shaped_fixed_window_departs_within_limit_per_window(
        (limit, window_ns, start) in (1u64..=30, 1_000u64..=1_000_000_000, 0u64..1_000_000_000_000),
        max_delay_frac in 0u64..=200,
        waiting_max in 0usize..8,
        arr in arrivals(),
    ) {
        let max_delay_ns = window_ns / 100 * max_delay_frac;
        let mut f = FixedWindow::new(limit, window_ns, Nanos(start)).unwrap();
        let departed = run(&mut f, start, &arr, window_ns, limit, (max_delay_ns, waiting_max));
        // Units departing in one aligned window never exceed its limit.
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        for &(at, cost) in &departed {
            *per_window.entry(at.0 / window_ns).or_default() += cost;
        }
        for (index, units) in per_window {
            prop_assert!(units <= limit, "window {index}: {units} > {limit}");
        }
    }

    #[test]
    fn shaped_sliding_window_departs_within_limit_plus_rate(
        (limit, window_ns, start) in (1u64..=30, 1_000u64..=1_000_000_000, 0u64..1_000_000_000_000),
        max_delay_frac in 0u64..=200,
        waiting_max in 0usize..8,
        arr in arrivals(),
    ) {
        let max_delay_ns = window_ns / 100 * max_delay_frac;
        let mut s = SlidingWindow::new(limit, window_ns, Nanos(start)).unwrap();
        let departed = run(&mut s, start, &arr, window_ns, limit, (max_delay_ns, waiting_max));
        let rate = Rate::new(limit, window_ns).unwrap();
        check_every_window(&departed, |t| u128::from(limit) + u128::from(rate.units_in(t)));
    }
}

/// Shaping does admit what a refusing limiter would not: a burst at one instant spreads
/// out at the rate, up to the bound.
#[test]
fn a_burst_is_spread_at_the_rate() {
    let rate = Rate::per_second(10).unwrap();
    let mut b = TokenBucket::full(rate, 2, Nanos(0));
    let delays: Vec<Option<u64>> = (0..6)
        .map(
            |_| match take_shaped(&mut b, 1, Nanos(0), 300_000_000, |_| true) {
                Shaped::Admit { delay_ns, .. } => Some(delay_ns / 1_000_000),
                Shaped::Deny { .. } => None,
            },
        )
        .collect();
    assert_eq!(
        delays,
        [Some(0), Some(0), Some(100), Some(200), Some(300), None]
    );
}
