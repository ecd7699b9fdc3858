//! The demand meter: exact integer rates over a sliding window, bounded memory, and no
//! harm from a clock that stands still or steps back.

use leasehold_common::lease::{Demand, DemandMeter, HolderConfig};
use leasehold_common::time::Nanos;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

#[test]
fn steady_spending_reads_as_its_rate() {
    // 100 ms slots, 10 of them: a 1 s window.
    let mut m = DemandMeter::new(100, 10, Nanos::ZERO).unwrap();
    assert_eq!(m.window_ns(), SEC);
    // 5 units every 10 ms = 500 units/s, for 3 s.
    for i in 1..=300u64 {
        m.record(5, Nanos(i * 10 * MS));
    }
    // The window holds the 9 full slots before the current one and its elapsed part:
    // 455 units over 0.905 s.
    let rate = m.rate(Nanos(3 * SEC + 5 * MS)).milli_per_s();
    assert_eq!(rate, 455 * 1_000 * SEC / (905 * MS));
    assert!((495_000..=505_000).contains(&rate), "rate {rate}");
}

#[test]
fn idle_meter_decays_to_zero() {
    let mut m = DemandMeter::new(100, 10, Nanos::ZERO).unwrap();
    m.record(1_000, Nanos(50 * MS));
    assert!(m.rate(Nanos(60 * MS)) > Demand::ZERO);
    assert_eq!(m.rate(Nanos(SEC + 100 * MS)), Demand::ZERO);
    // Recording after a long gap clears the stale slots rather than reviving them.
    m.record(1, Nanos(50 * SEC));
    // One unit over the 0.9 s of the window that has elapsed.
    assert_eq!(m.rate(Nanos(50 * SEC)), Demand(1_111));
}

#[test]
fn one_early_spend_is_not_read_as_a_huge_rate() {
    let mut m = DemandMeter::new(100, 10, Nanos(7 * SEC)).unwrap();
    m.record(3, Nanos(7 * SEC)); // zero elapsed time
                                 // Divided by at least one slot (100 ms): 30 units/s, not infinity.
    assert_eq!(m.rate(Nanos(7 * SEC)), Demand::from_units_per_s(30));
}

#[test]
fn clock_rollback_counts_as_no_elapsed_time() {
    let mut m = DemandMeter::new(100, 10, Nanos::ZERO).unwrap();
    m.record(10, Nanos(2 * SEC));
    let before = m.rate(Nanos(2 * SEC));
    // A reading 1.5 s back neither lands in a cleared slot nor stretches the window.
    m.record(10, Nanos(500 * MS));
    assert_eq!(
        m.rate(Nanos(500 * MS)).milli_per_s(),
        2 * before.milli_per_s()
    );
    assert_eq!(m.rate(Nanos(2 * SEC)), m.rate(Nanos(0)));
}

#[test]
fn config_sizes_the_meter() {
    let m = HolderConfig::default().demand_meter(Nanos::ZERO).unwrap();
    assert_eq!(m.window_ns(), 4 * SEC);
    let bad = HolderConfig {
        max_request_credit: 0,
        ..HolderConfig::default()
    };
    assert_eq!(
        bad.demand_meter(Nanos::ZERO).unwrap_err().field,
        "max_request_credit"
    );
}

#[test]
fn bad_sizes_are_refused() {
    assert_eq!(
        DemandMeter::new(0, 10, Nanos::ZERO).unwrap_err().field,
        "demand_slot_ms"
    );
    assert_eq!(
        DemandMeter::new(100, 0, Nanos::ZERO).unwrap_err().field,
        "demand_slots"
    );
    assert_eq!(
        DemandMeter::new(100, 65, Nanos::ZERO).unwrap_err().field,
        "demand_slots"
    );
}

#[test]
fn sizing_rounds_up_and_compares_exactly() {
    let d = Demand(1_500); // 1.5 units/s
    assert_eq!(d.units_over_ms_ceil(1_000), 2);
    assert_eq!(d.units_over_ms_ceil(2_000), 3);
    assert!(d.outruns(2, 2_000), "2 units last 1.33 s < 2 s");
    assert!(!d.outruns(3, 2_000), "3 units last exactly 2 s");
    assert!(!Demand(u64::MAX).outruns(u64::MAX, 1));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Units recorded inside the window are all counted (the rate times the covered time
    /// gives them back), whatever order the readings come in.
    #[test]
    fn window_counts_everything_recent(
        steps in proptest::collection::vec((0u64..1_000, -50i64..200), 1..60),
    ) {
        let slot_ms = 100;
        let mut m = DemandMeter::new(slot_ms, 64, Nanos::ZERO).unwrap();
        let mut now = 0u64;
        let mut newest = 0u64;
        let mut total = 0u64;
        for (units, dt_ms) in steps {
            now = now.saturating_add_signed(dt_ms * MS as i64);
            newest = newest.max(now);
            m.record(units, Nanos(now));
            total += units;
        }
        // 64 slots × 100 ms = 6.4 s; with at most 60 × 200 ms = 12 s elapsed, look at a
        // moment while all of it is still inside when it fits.
        prop_assume!(newest < 6 * SEC);
        let at = Nanos(newest);
        let covered = newest.max(slot_ms * MS);
        let rate = u128::from(m.rate(at).milli_per_s());
        let exact = u128::from(total) * 1_000 * u128::from(SEC) / u128::from(covered);
        prop_assert_eq!(rate, exact);
    }
}
