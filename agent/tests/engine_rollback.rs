//! All or nothing across dimensions: a refused request leaves no trace in any dimension it
//! charged before the refusal, whatever the algorithms and their order.
//!
//! The property runs two engines with the same policies: one is offered every request,
//! the other only those the first admitted. If refusals left nothing behind, the second
//! admits each of them too and reports the same units remaining in every dimension.

mod wall;
use wall::manual_wall;

use leasehold_agent::credit::SlotState;
use leasehold_agent::engine::{
    AdmitRequest, DenyReason, Dimension, Emergency, Engine, Outcome, RuleSource,
};
use leasehold_common::policy::Policy;
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn policy(id: &str, body: &str) -> Policy {
    Policy::from_yaml(&format!(
        "id: {id}\ndimensions: [{{name: tenant, required: true}}]\n{body}"
    ))
    .expect("test policy is valid")
}

/// One policy of each kind of state a dimension can charge.
fn policies() -> Vec<Policy> {
    vec![
        policy("leased", "rate: {units: 10, per: 1s}\nburst: 50\n"),
        policy(
            "bucket",
            "rate: {units: 5, per: 1s}\nburst: 3\nscope: process\n",
        ),
        policy(
            "gcra",
            "rate: {units: 4, per: 1s}\nburst: 2\nscope: process\nalgorithm: gcra\n",
        ),
        policy(
            "fixed",
            "rate: {units: 3, per: 1s}\nscope: process\nalgorithm: fixed_window\n",
        ),
        policy(
            "sliding",
            "rate: {units: 4, per: 1s}\nscope: process\nalgorithm: sliding_window\n",
        ),
        policy(
            "conc",
            "algorithm: concurrency\nconcurrency: {max_in_flight: 2}\nscope: process\n",
        ),
    ]
}

const IDS: [&str; 6] = ["leased", "bucket", "gcra", "fixed", "sliding", "conc"];

/// An engine whose `leased` key holds `credit` units.
fn engine(credit: u64) -> Engine {
    // One wall clock for every engine compared, so their windows start together.
    let (_, clock) = manual_wall("2026-03-10T00:00:00Z");
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource::from_policies(policies()))
        .unwrap();
    let rx = e.take_acquire_queue().unwrap();
    let dims = [Dimension::policy("leased", &[("tenant", "a")])];
    e.admit(&AdmitRequest::new(&dims), Nanos(0));
    let acquire = rx.try_recv().expect("the first request asks for a lease");
    acquire.slot.deposit(credit, u64::MAX);
    acquire.slot.set_state(SlotState::Active);
    e
}

/// A request: dimensions by index into [`IDS`] (in this order), hits, and the time
/// since the previous request.
#[derive(Clone, Debug)]
struct Op {
    dims: Vec<usize>,
    hits: u64,
    after_ms: u64,
}

fn op() -> impl Strategy<Value = Op> {
    (
        Just((0..IDS.len()).collect::<Vec<_>>()).prop_shuffle(),
        1..=IDS.len(),
        1..3u64,
        0..400u64,
    )
        .prop_map(|(order, n, hits, after_ms)| Op {
            dims: order[..n].to_vec(),
            hits,
            after_ms,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_refused_request_leaves_no_trace(ops in prop::collection::vec(op(), 1..60)) {
        let everything = engine(40);
        let admitted_only = engine(40);
        let mut now = Nanos(1);
        let mut refused = 0;
        for op in &ops {
            now = now.saturating_add_ns(op.after_ms * MS);
            let dims: Vec<_> = op
                .dims
                .iter()
                .map(|&i| Dimension::policy(IDS[i], &[("tenant", "a")]))
                .collect();
            let req = AdmitRequest { hits: op.hits, ..AdmitRequest::new(&dims) };
            let first = everything.admit(&req, now);
            if !first.allowed {
                refused += 1;
                let undone = first.results.iter().filter(|r| r.outcome == Outcome::RolledBack);
                prop_assert!(undone.count() < dims.len(), "some dimension refused");
                continue;
            }
            let second = admitted_only.admit(&req, now);
            prop_assert!(second.allowed, "refusals before {op:?} left a trace");
            let left = |d: &leasehold_agent::engine::Decision| {
                d.results.iter().map(|r| r.remaining).collect::<Vec<_>>()
            };
            prop_assert_eq!(left(&first), left(&second), "after {:?}", op);
        }
        // Most schedules refuse something; the property says nothing otherwise.
        prop_assume!(refused > 0);
    }
}

#[test]
fn calendar_and_restricted_charges_are_undone_too() {
    let daily = policy(
        "daily",
        "algorithm: calendar_quota\ncalendar: {period: day, time_zone: UTC, units: 2}\nscope: process\n",
    );
    let tight = policy(
        "tight",
        "rate: {units: 1, per: 1h}\nburst: 1\nscope: process\n",
    );
    let (_wall, clock) = manual_wall("2026-03-10T12:00:00Z");
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource::from_policies([
            daily,
            tight,
            policies().remove(1),
        ]))
        .unwrap();
    let rate = Rate::per_second(2).unwrap();
    e.set_emergency(
        "bucket",
        Emergency::Restricted {
            min_priority: 0,
            rate,
        },
    )
    .unwrap();
    let dims = [
        Dimension::policy("daily", &[("tenant", "a")]),
        Dimension::policy("bucket", &[("tenant", "a")]),
        Dimension::policy("tight", &[("tenant", "a")]),
    ];
    let all = AdmitRequest::new(&dims);
    assert!(e.admit(&all, Nanos(0)).allowed);
    for _ in 0..3 {
        let d = e.admit(&all, Nanos(0));
        let outcomes: Vec<_> = d.results.iter().map(|r| r.outcome).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::RolledBack,
                Outcome::RolledBack,
                Outcome::Denied(DenyReason::OverLimit)
            ]
        );
    }
    // The quota's second unit and the restricted bucket's one unit a second are intact.
    let first_two = AdmitRequest::new(&dims[..2]);
    let d = e.admit(&first_two, Nanos(0));
    assert_eq!(
        d.results.iter().map(|r| r.outcome).collect::<Vec<_>>(),
        [Outcome::Admitted, Outcome::Restricted]
    );
    assert_eq!(d.results[0].remaining, 0, "two units a day");
    assert!(!e.admit(&first_two, Nanos(0)).allowed);
}
