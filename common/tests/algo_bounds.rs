//! Every admission algorithm against its documented worst-case bound.
//!
//! Random arrival sequences (zero gaps, short and long gaps, big jumps, backward clock
//! steps, weighted costs including costs above capacity) are fed to each algorithm. For
//! every pair of admitted events `i ≤ j` the units admitted in `[t_i, t_j]` must not exceed
//! the algorithm's bound for `T = t_j − t_i`, computed with exact integer math. Every
//! finite `retry_after_ns` is checked to be exact: the same cost is admitted after exactly
//! that wait and denied one nanosecond earlier.

use leasehold_common::algo::{Decision, FixedWindow, Gcra, Limiter, SlidingWindow, TokenBucket};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;

/// One offered request, with its gap and cost expressed relative to the algorithm's scale.
#[derive(Clone, Debug)]
struct Arrival {
    back: bool,
    gap_kind: u8,
    gap_raw: u64,
    cost_kind: u8,
    cost_raw: u64,
}

fn arrival() -> impl Strategy<Value = Arrival> {
    (
        prop::bool::weighted(0.1),
        0u8..7,
        any::<u64>(),
        0u8..4,
        any::<u64>(),
    )
        .prop_map(|(back, gap_kind, gap_raw, cost_kind, cost_raw)| Arrival {
            back,
            gap_kind,
            gap_raw,
            cost_kind,
            cost_raw,
        })
}

fn arrivals() -> impl Strategy<Value = Vec<Arrival>> {
    prop::collection::vec(arrival(), 1..120)
}

impl Arrival {
    /// Zero, a fraction of a step, a few steps, a big jump (`step_ns` is the time one unit
    /// of capacity takes to come back, or the window length), or exactly the last
    /// `retry_after` — the adversarial client that comes back at the first allowed moment.
    fn gap_ns(&self, step_ns: u64, last_retry_ns: u64) -> u64 {
        let span = match self.gap_kind {
            0 => return 0,
            1 => step_ns / 4,
            2 => step_ns.saturating_mul(2),
            3 => step_ns.saturating_mul(8),
            4 => step_ns.saturating_mul(200),
            _ if last_retry_ns == u64::MAX => return 0,
            _ => return last_retry_ns,
        };
        self.gap_raw % span.saturating_add(1)
    }

    /// Mostly small costs, sometimes up to two above the capacity.
    fn cost(&self, capacity: u64) -> u64 {
        match self.cost_kind {
            0 => 1,
            1 => self.cost_raw % 4,
            2 => self.cost_raw % (capacity / 2 + 1),
            _ => self.cost_raw % (capacity + 3),
        }
    }
}

/// What one run offered and admitted.
struct Trace {
    /// Raw readings and costs, in order.
    offered: Vec<(Nanos, u64)>,
    /// Admitted `(effective time, cost)`: the effective time is the running maximum.
    admitted: Vec<(Nanos, u64)>,
}

/// Feeds `arrivals` to `lim` (created at `start`): each arrival moves the clock forward by
/// its gap, or back by it. Checks every finite retry on the way.
fn run<L: Limiter + Clone>(
    lim: &mut L,
    start: u64,
    arrivals: &[Arrival],
    step_ns: u64,
    capacity: u64,
) -> Trace {
    let mut trace = Trace {
        offered: Vec::new(),
        admitted: Vec::new(),
    };
    let (mut raw, mut latest, mut last_retry_ns) = (start, Nanos(start), 0);
    for a in arrivals {
        let gap = a.gap_ns(step_ns, last_retry_ns);
        raw = if a.back {
            raw.saturating_sub(gap)
        } else {
            raw.saturating_add(gap)
        };
        let (now, cost) = (Nanos(raw), a.cost(capacity));
        latest = latest.max(now);
        trace.offered.push((now, cost));
        match lim.try_take(cost, now) {
            Decision::Admit { .. } => trace.admitted.push((latest, cost)),
            Decision::Deny { retry_after_ns, .. } => {
                check_retry(lim, cost, latest, retry_after_ns);
                last_retry_ns = retry_after_ns;
            }
        }
    }
    trace
}

/// Feeds fixed readings; returns the admitted `(effective time, cost)` pairs.
fn replay<L: Limiter>(lim: &mut L, start: u64, seq: &[(Nanos, u64)]) -> Vec<(Nanos, u64)> {
    let mut latest = Nanos(start);
    let mut admitted = Vec::new();
    for &(now, cost) in seq {
        latest = latest.max(now);
        if lim.try_take(cost, now).is_admit() {
            admitted.push((latest, cost));
        }
    }
    admitted
}

fn check_retry<L: Limiter + Clone>(lim: &L, cost: u64, now: Nanos, retry_after_ns: u64) {
    assert!(retry_after_ns > 0, "a denial must not say 'retry now'");
    if retry_after_ns == u64::MAX {
        return;
    }
    let at = now.saturating_add_ns(retry_after_ns);
    assert!(
        lim.clone().try_take(cost, at).is_admit(),
        "cost {cost} denied at {now:?} must be admitted after {retry_after_ns} ns"
    );
    assert!(
        !lim.clone().try_take(cost, Nanos(at.0 - 1)).is_admit(),
        "cost {cost} denied at {now:?} must still be denied 1 ns before {retry_after_ns} ns"
    );
}

/// Checks `sum(i..=j) ≤ bound(t_j − t_i)` for every pair of admitted events.
fn check_every_window(admitted: &[(Nanos, u64)], bound: impl Fn(u64) -> u128) {
    let mut prefix = vec![0u128];
    for &(_, cost) in admitted {
        prefix.push(prefix.last().unwrap() + u128::from(cost));
    }
    for i in 0..admitted.len() {
        for j in i..admitted.len() {
            let t_ns = admitted[j].0.saturating_since(admitted[i].0);
            let sum = prefix[j + 1] - prefix[i];
            let max = bound(t_ns);
            assert!(
                sum <= max,
                "{sum} units admitted in [{:?}, {:?}] (T = {t_ns} ns), bound {max}",
                admitted[i].0,
                admitted[j].0
            );
        }
    }
}

/// `B + ⌊r·T⌋`.
fn bucket_bound(rate: Rate, burst: u64) -> impl Fn(u64) -> u128 {
    move |t_ns| u128::from(burst) + u128::from(rate.units_in(t_ns))
}

/// `limit × (⌈T/W⌉ + 1)`.
fn fixed_bound(limit: u64, window_ns: u64) -> impl Fn(u64) -> u128 {
    move |t_ns| u128::from(limit) * (u128::from(t_ns.div_ceil(window_ns)) + 1)
}

/// `limit + ⌊limit·T/W⌋`.
fn sliding_bound(limit: u64, window_ns: u64) -> impl Fn(u64) -> u128 {
    let rate = Rate::new(limit, window_ns).unwrap();
    move |t_ns| u128::from(limit) + u128::from(rate.units_in(t_ns))
}

/// Rate and burst: periods that rarely divide evenly, to exercise carried remainders.
fn bucket_config() -> impl Strategy<Value = (Rate, u64, u64, bool)> {
    (
        1u64..=20,
        1u64..=2_000_000_000,
        1u64..=30,
        0u64..1_000_000_000_000,
        any::<bool>(),
    )
        .prop_map(|(units, period_ns, burst, start, full)| {
            (Rate::new(units, period_ns).unwrap(), burst, start, full)
        })
}

fn window_config() -> impl Strategy<Value = (u64, u64, u64)> {
    (1u64..=30, 1u64..=1_000_000_000, 0u64..1_000_000_000_000)
}

fn step_ns(rate: Rate) -> u64 {
    rate.ns_per_unit_ceil().max(1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn token_bucket_admits_at_most_burst_plus_rate((rate, burst, start, full) in bucket_config(), arr in arrivals()) {
        let now = Nanos(start);
        let mut b = if full { TokenBucket::full(rate, burst, now) } else { TokenBucket::empty(rate, burst, now) };
        let trace = run(&mut b, start, &arr, step_ns(rate), burst);
        check_every_window(&trace.admitted, bucket_bound(rate, burst));
    }

    #[test]
    fn gcra_admits_at_most_burst_plus_rate((rate, burst, start, full) in bucket_config(), arr in arrivals()) {
        let now = Nanos(start);
        let mut g = if full { Gcra::full(rate, burst, now) } else { Gcra::empty(rate, burst, now) }.unwrap();
        let trace = run(&mut g, start, &arr, step_ns(rate), burst);
        check_every_window(&trace.admitted, bucket_bound(rate, burst));
    }

    #[test]
    fn fixed_window_admits_at_most_limit_per_window_touched((limit, window_ns, start) in window_config(), arr in arrivals()) {
        let mut f = FixedWindow::new(limit, window_ns, Nanos(start)).unwrap();
        let trace = run(&mut f, start, &arr, window_ns, limit);
        check_every_window(&trace.admitted, fixed_bound(limit, window_ns));
    }

    #[test]
    fn sliding_window_admits_at_most_limit_plus_rate((limit, window_ns, start) in window_config(), arr in arrivals()) {
        let mut s = SlidingWindow::new(limit, window_ns, Nanos(start)).unwrap();
        let trace = run(&mut s, start, &arr, window_ns, limit);
        check_every_window(&trace.admitted, sliding_bound(limit, window_ns));
    }
}

fn units(admitted: &[(Nanos, u64)]) -> u64 {
    admitted.iter().map(|a| a.1).sum()
}

/// The bounds above are tight enough to catch the classic mistakes; these pin the
/// worst cases each algorithm is documented to allow.
#[test]
fn documented_worst_cases_are_reached() {
    // Fixed window: two full limits in two nanoseconds across a boundary.
    let mut f = FixedWindow::new(5, 1_000, Nanos(0)).unwrap();
    let admitted = replay(&mut f, 0, &[(Nanos(999), 5), (Nanos(1_000), 5)]);
    assert_eq!(units(&admitted), 10);
    assert_eq!(fixed_bound(5, 1_000)(1), 10);

    // Sliding window: a full limit just before a boundary, then ⌊limit·e/W⌋ more by e
    // into the next window, meets limit + ⌊limit·T/W⌋ with T = e + 1.
    let mut s = SlidingWindow::new(8, 1_000, Nanos(0)).unwrap();
    let seq = [(Nanos(999), 8), (Nanos(1_250), 2), (Nanos(1_250), 1)];
    assert_eq!(units(&replay(&mut s, 0, &seq)), 10);
    assert_eq!(sliding_bound(8, 1_000)(251), 10);

    // GCRA: a full burst, then exactly one unit per emission interval (333.3… ns).
    let rate = Rate::new(3, 1_000).unwrap();
    let mut g = Gcra::full(rate, 4, Nanos(0)).unwrap();
    let seq = [
        (Nanos(0), 4),
        (Nanos(333), 1),
        (Nanos(334), 1),
        (Nanos(1_000), 2),
    ];
    let admitted = replay(&mut g, 0, &seq);
    assert_eq!(admitted.len(), 3, "333 ns is one nanosecond early");
    assert_eq!(units(&admitted), 7);
    assert_eq!(bucket_bound(rate, 4)(1_000), 7);
}

/// The effective timeline of `offered`: each reading replaced by the running maximum.
fn running_max(start: u64, offered: &[(Nanos, u64)]) -> Vec<(Nanos, u64)> {
    let mut latest = Nanos(start);
    offered
        .iter()
        .map(|&(t, cost)| {
            latest = latest.max(t);
            (latest, cost)
        })
        .collect()
}

/// Runs `lim` on `arr` (with backward steps) and a copy on the running-maximum readings;
/// the stepping clock must admit no more, and here decides exactly the same.
fn check_rollback<L: Limiter + Clone>(
    lim: L,
    start: u64,
    arr: &[Arrival],
    step_ns: u64,
    capacity: u64,
) {
    let mut stepping = lim.clone();
    let trace = run(&mut stepping, start, arr, step_ns, capacity);
    let mut steady = lim;
    let steady_admitted = replay(&mut steady, start, &running_max(start, &trace.offered));
    assert!(units(&trace.admitted) <= units(&steady_admitted));
    assert_eq!(trace.admitted, steady_admitted);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// A clock that steps back mints nothing: no more is admitted than had each backward
    /// reading been the latest reading instead.
    #[test]
    fn rollback_mints_nothing(
        (rate, burst, start, full) in bucket_config(),
        (limit, window_ns, _) in window_config(),
        arr in arrivals(),
    ) {
        let now = Nanos(start);
        let bucket = if full { TokenBucket::full(rate, burst, now) } else { TokenBucket::empty(rate, burst, now) };
        let gcra = if full { Gcra::full(rate, burst, now) } else { Gcra::empty(rate, burst, now) }.unwrap();
        check_rollback(bucket, start, &arr, step_ns(rate), burst);
        check_rollback(gcra, start, &arr, step_ns(rate), burst);
        check_rollback(FixedWindow::new(limit, window_ns, now).unwrap(), start, &arr, window_ns, limit);
        check_rollback(SlidingWindow::new(limit, window_ns, now).unwrap(), start, &arr, window_ns, limit);
    }
}
