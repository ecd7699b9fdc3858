//! Weighted shares over time when holders are saturated: every holder wants more than the
//! key produces, spends what it gets at once and comes straight back. A budget split's
//! weights must hold for the credit each receives per unit of time (not only per grant),
//! and credit nobody else is waiting for must still flow to whoever asks (work conserving).

use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, Outcome, PolicyParams, Report,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;
use std::collections::BTreeMap;

const MS: u64 = 1_000_000;
const RATE: u64 = 1_000;
const HORIZON_MS: u64 = 200;

/// One saturated holder: how often it comes back, and when it stops asking.
#[derive(Clone, Debug)]
struct Holder {
    weight: u64,
    /// Milliseconds between its requests (it asks again at once when denied after this).
    every_ms: u64,
    /// Units per second it would spend if it could.
    demand: u64,
    /// It goes silent (crashes) from this millisecond on.
    silent_from_ms: u64,
    /// It reports its spending one request late, so spent credit stays outstanding longer.
    late_reports: bool,
}

struct Run {
    /// Credit received per holder in the measured span.
    received: Vec<u64>,
    /// Credit received by all holders in the measured span.
    total: u64,
}

fn params(weights: &[u64]) -> PolicyParams {
    PolicyParams {
        weights: weights
            .iter()
            .enumerate()
            .map(|(i, w)| (format!("h{i}"), *w))
            .collect::<BTreeMap<_, _>>(),
        policy_id: "p".into(),
        version: 1,
        rate: Rate::per_second(RATE).unwrap(),
        burst: 300,
        lease: LeaseParams {
            ttl_ms: 2_000,
            min_credit: 1,
            max_credit: 1_000_000,
            reserve_ppm: 0,
            reserve_priority_min: 8,
            refresh_horizon_ms: HORIZON_MS,
        },
        window: None,
        owner: Default::default(),
        exact: false,
    }
}

/// Drives `holders` for `run_ms`, measuring from `measure_from_ms`. Each holder spends
/// what it received, up to its demand since its last request, and reports it with its
/// next request, asking for two horizons of its demand.
fn run(holders: &[Holder], run_ms: u64, measure_from_ms: u64, stagger_ms: u64) -> Run {
    let weights: Vec<u64> = holders.iter().map(|h| h.weight).collect();
    let mut ledger = Ledger::new(LedgerConfig::root("g"));
    ledger
        .apply(Nanos(0), Command::PutPolicy(params(&weights)))
        .unwrap();
    let n = holders.len();
    let mut lease = vec![None; n];
    let (mut credit, mut used) = (vec![0u64; n], vec![0u64; n]);
    let mut reported = vec![0u64; n];
    let mut next_ms: Vec<u64> = (0..n as u64).map(|i| i * stagger_ms).collect();
    let mut last_ms = vec![0u64; n];
    let mut received = vec![0u64; n];
    let mut request = 0;
    for ms in 0..run_ms {
        let now = Nanos(ms * MS);
        for (i, h) in holders.iter().enumerate() {
            if ms != next_ms[i] || ms >= h.silent_from_ms {
                continue;
            }
            // Spend what the demand since the last request allows, at most what is held.
            let can = h.demand * (ms - last_ms[i]).max(1) / 1_000;
            let before = used[i];
            used[i] += can.min(credit[i] - used[i]);
            reported[i] = if h.late_reports { before } else { used[i] };
            last_ms[i] = ms;
            next_ms[i] = ms + h.every_ms;
            request += 1;
            let want = h.demand * 2 * HORIZON_MS / 1_000;
            let cmd = match lease[i] {
                None => Command::Acquire(Acquire {
                    holder_id: format!("h{i}"),
                    policy_id: "p".into(),
                    key: "k".into(),
                    want_credit: want,
                    demand_milli_per_sec: h.demand * 1_000,
                    request_id: request,
                    priority: 0,
                }),
                Some(id) => Command::Report(Report {
                    holder_id: format!("h{i}"),
                    lease_id: id,
                    used: reported[i],
                    return_credit: 0,
                    want_credit: want.saturating_sub(credit[i] - used[i]),
                    demand_milli_per_sec: h.demand * 1_000,
                    request_id: request,
                    priority: 0,
                }),
            };
            if let Outcome::Granted(g) = ledger.apply(now, cmd).unwrap() {
                let added = g.lease.credit - credit[i];
                if ms >= measure_from_ms {
                    received[i] += added;
                }
                if g.lease.credit > credit[i] || lease[i].is_none() {
                    lease[i] = Some(g.lease.lease_id);
                }
                credit[i] = g.lease.credit;
            }
        }
    }
    let total = received.iter().sum();
    Run { received, total }
}

fn saturated(weight: u64, every_ms: u64) -> Holder {
    Holder {
        weight,
        every_ms,
        demand: 10 * RATE,
        silent_from_ms: u64::MAX,
        late_reports: false,
    }
}

/// Received per unit of weight, in parts per thousand of the fair amount.
fn per_mille_of_fair(r: &Run, holders: &[Holder]) -> Vec<u64> {
    let weight: u64 = holders.iter().map(|h| h.weight).sum();
    r.received
        .iter()
        .zip(holders)
        .map(|(got, h)| got * weight * 1_000 / (r.total * h.weight).max(1))
        .collect()
}

/// Every holder received its weighted share of the total within `tolerance` per mille.
fn assert_weighted(r: &Run, holders: &[Holder], tolerance: u64) {
    let fair = per_mille_of_fair(r, holders);
    assert!(
        fair.iter()
            .all(|f| (1_000 - tolerance..=1_000 + tolerance).contains(f)),
        "received {:?}, per mille of the weighted share {fair:?}",
        r.received
    );
}

/// The key handed out at least `percent` of what it produced over `span_s` seconds.
fn assert_handed_out(r: &Run, span_s: u64, percent: u64) {
    let produced = RATE * span_s;
    assert!(
        r.total >= produced * percent / 100,
        "only {} of {produced} handed out",
        r.total
    );
}

#[test]
fn a_three_to_one_split_holds_when_both_come_straight_back() {
    let holders = [saturated(3, 2), saturated(1, 2)];
    let r = run(&holders, 10_000, 2_000, 1);
    assert_weighted(&r, &holders, 100);
    assert_handed_out(&r, 8, 95);
}

#[test]
fn the_lighter_holder_coming_back_more_often_gains_nothing() {
    let holders = [saturated(3, 20), saturated(1, 1)];
    let r = run(&holders, 10_000, 2_000, 0);
    assert_weighted(&r, &holders, 100);
}

#[test]
fn late_reports_keep_the_split_and_the_key_busy() {
    let mut holders = [saturated(3, 10), saturated(1, 3)];
    for h in &mut holders {
        h.late_reports = true;
    }
    let r = run(&holders, 10_000, 2_000, 1);
    assert_weighted(&r, &holders, 100);
    assert_handed_out(&r, 8, 90);
}

#[test]
fn credit_a_silent_holder_is_owed_flows_to_the_one_still_asking() {
    let mut heavy = saturated(3, 2);
    heavy.silent_from_ms = 3_000;
    let holders = [heavy, saturated(1, 2)];
    // Measure from one lease ttl after the heavy holder went quiet.
    let r = run(&holders, 10_000, 5_000, 1);
    assert_eq!(r.received[0], 0);
    assert!(
        r.received[1] >= RATE * 5 * 95 / 100,
        "the remaining holder received {} of {}",
        r.received[1],
        RATE * 5
    );
}

#[test]
fn a_heavy_holder_wanting_less_than_its_weight_leaves_the_rest() {
    let mut heavy = saturated(3, 5);
    heavy.demand = RATE / 5;
    let holders = [heavy, saturated(1, 5)];
    let r = run(&holders, 10_000, 2_000, 2);
    let span_s = 8;
    assert!(
        r.received[0] >= RATE / 5 * span_s * 9 / 10,
        "the heavy holder got {} for a demand of {}",
        r.received[0],
        RATE / 5 * span_s
    );
    assert_handed_out(&r, span_s, 95);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any weights and return intervals: each saturated holder receives its weighted share
    /// within 15 %, and the key hands out at least 93 % of what it produces.
    #[test]
    fn saturated_holders_split_by_weight(
        spec in prop::collection::vec((1..6u64, 1..30u64), 2..5),
        stagger_ms in 0..5u64,
    ) {
        let holders: Vec<Holder> = spec.iter().map(|&(w, e)| saturated(w, e)).collect();
        let r = run(&holders, 6_000, 2_000, stagger_ms);
        let fair = per_mille_of_fair(&r, &holders);
        prop_assert!(
            fair.iter().all(|f| (850..=1_150).contains(f)),
            "received {:?}, per mille of the weighted share {:?}", r.received, fair
        );
        prop_assert!(r.total >= RATE * 4 * 93 / 100, "only {} of {}", r.total, RATE * 4);
    }
}
