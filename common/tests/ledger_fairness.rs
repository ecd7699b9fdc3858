//! Fair shares: the water-filling itself, and holders of one contended key over time.

use leasehold_common::ledger::fair::{max_min_shares, Claim};
use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, Outcome, PolicyParams, Report,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;

fn claims() -> impl Strategy<Value = Vec<Claim>> {
    prop::collection::vec(
        (0..10_000u64, 1..10u64).prop_map(|(demand, weight)| Claim { demand, weight }),
        0..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn shares_are_weighted_max_min_fair(capacity in 0..50_000u64, claims in claims()) {
        let shares = max_min_shares(capacity, &claims);
        prop_assert_eq!(shares.len(), claims.len());
        let total: u64 = shares.iter().sum();
        prop_assert!(total <= capacity, "shares {} exceed capacity {}", total, capacity);
        let demand: u64 = claims.iter().map(|c| c.demand).sum();
        for (s, c) in shares.iter().zip(&claims) {
            prop_assert!(*s <= c.demand, "share above demand");
        }
        if demand <= capacity {
            let demands: Vec<u64> = claims.iter().map(|c| c.demand).collect();
            prop_assert_eq!(&shares, &demands, "supply suffices: nobody is cut");
        } else {
            // Work-conserving up to rounding: at most one unit per claimant is left over.
            prop_assert!(total + claims.len() as u64 >= capacity);
        }
        // Whoever is cut has, per unit of weight, within rounding of the most anyone has.
        for (i, ci) in claims.iter().enumerate() {
            if shares[i] >= ci.demand {
                continue;
            }
            for (j, cj) in claims.iter().enumerate() {
                let lhs = u128::from(shares[i] + 1) * u128::from(cj.weight);
                let rhs = u128::from(shares[j]) * u128::from(ci.weight);
                prop_assert!(lhs >= rhs, "claimant {} cut below claimant {}", i, j);
            }
        }
    }
}

const MS: u64 = 1_000_000;

/// Holders with fixed demands renew every refresh horizon and spend what they are given up
/// to their demand; returns each holder's spend over the last `measure` rounds.
///
/// Spent credit counts as outstanding until it is reported, so a key serves a horizon's
/// demand `D` in full only with a burst of at least `2·D`; the burst here is two seconds of
/// rate for a one-second horizon.
fn run_rounds(rate: u64, demands: &[u64], rounds: usize, measure: usize) -> Vec<u64> {
    let horizon_ms = 1_000;
    let params = PolicyParams {
        weights: Default::default(),
        window: None,
        owner: Default::default(),
        exact: false,
        policy_id: "p".into(),
        version: 1,
        rate: Rate::per_second(rate).unwrap(),
        burst: 2 * rate,
        lease: LeaseParams {
            ttl_ms: 5_000,
            min_credit: 1,
            max_credit: 1_000_000,
            reserve_ppm: 0,
            reserve_priority_min: 8,
            refresh_horizon_ms: horizon_ms,
        },
    };
    let mut ledger = Ledger::new(LedgerConfig::root("g"));
    ledger.apply(Nanos(0), Command::PutPolicy(params)).unwrap();
    let n = demands.len();
    let mut lease_ids = vec![None; n];
    let mut spent = vec![0u64; n];
    let mut credit = vec![0u64; n];
    let mut measured = vec![0u64; n];
    let mut request = 0u64;
    for round in 0..rounds {
        let now = Nanos(round as u64 * horizon_ms * MS);
        for i in 0..n {
            request += 1;
            let demand_milli = demands[i] * 1_000;
            let want = demands[i];
            let cmd = match lease_ids[i] {
                None => Command::Acquire(Acquire {
                    holder_id: format!("h{i}"),
                    policy_id: "p".into(),
                    key: "k".into(),
                    want_credit: want,
                    demand_milli_per_sec: demand_milli,
                    request_id: request,
                    priority: 0,
                }),
                Some(id) => Command::Report(Report {
                    holder_id: format!("h{i}"),
                    lease_id: id,
                    used: spent[i],
                    return_credit: 0,
                    want_credit: want.saturating_sub(credit[i] - spent[i]),
                    demand_milli_per_sec: demand_milli,
                    request_id: request,
                    priority: 0,
                }),
            };
            if let Outcome::Granted(g) = ledger.apply(now, cmd).unwrap() {
                lease_ids[i] = Some(g.lease.lease_id);
                credit[i] = g.lease.credit;
            }
        }
        // Each holder spends up to one horizon of its demand.
        for i in 0..n {
            let units = demands[i].min(credit[i] - spent[i]);
            spent[i] += units;
            if round >= rounds - measure {
                measured[i] += units;
            }
        }
    }
    measured
}

#[test]
fn supply_that_suffices_serves_every_demand() {
    let demands = [10, 200, 35, 1, 400];
    let measured = run_rounds(1_000, &demands, 40, 20);
    for (i, d) in demands.iter().enumerate() {
        assert_eq!(
            measured[i],
            d * 20,
            "holder {i} was cut though supply suffices"
        );
    }
}

#[test]
fn contended_supply_converges_to_fair_shares_and_starves_nobody() {
    let demands = [50, 600, 900, 5];
    let rate = 1_000;
    let measured = run_rounds(rate, &demands, 60, 30);
    let claims: Vec<Claim> = demands
        .iter()
        .map(|&d| Claim {
            demand: d,
            weight: 1,
        })
        .collect();
    let fair = max_min_shares(rate, &claims);
    for i in 0..demands.len() {
        let per_round = measured[i] / 30;
        assert!(per_round > 0, "holder {i} starved");
        // Within 10% of its max-min share once converged.
        assert!(
            per_round * 10 >= fair[i] * 9,
            "holder {i}: {per_round}/round, fair share {}",
            fair[i]
        );
    }
    let total: u64 = measured.iter().sum();
    assert!(
        total <= rate * 30 + rate,
        "spent more than the key produced"
    );
}
