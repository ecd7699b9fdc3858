//! Exact decisions over random schedules: decisions and refunds of random sizes, on random
//! keys, at random times across many windows. No fixed window ever holds more admitted
//! units (net of the refunds that went back into it) than its limit, every refusal came
//! when the units did not fit, and every unit stays accounted for.

use leasehold_common::ledger::{
    Command, Decide, DecideItem, LeaseParams, Ledger, LedgerConfig, Level, Outcome, PolicyParams,
    Refund, WindowSpec,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;
use std::collections::BTreeMap;

const SEC: u64 = 1_000_000_000;
const WINDOW_NS: u64 = 10 * SEC;
const LIMIT: u64 = 7;

fn policy() -> PolicyParams {
    PolicyParams {
        policy_id: "q".into(),
        version: 1,
        rate: Rate::new(LIMIT, WINDOW_NS).unwrap(),
        burst: LIMIT,
        lease: LeaseParams::default(),
        weights: Default::default(),
        window: Some(WindowSpec::Fixed {
            window_ns: WINDOW_NS,
            limit: LIMIT,
        }),
        owner: Level::Global,
        exact: true,
    }
}

#[derive(Clone, Debug)]
enum Step {
    Decide { key: u8, units: u64 },
    RefundLast,
    Wait { ns: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..3, 1u64..4).prop_map(|(key, units)| Step::Decide { key, units }),
        1 => Just(Step::RefundLast),
        2 => (0u64..4 * SEC).prop_map(|ns| Step::Wait { ns }),
    ]
}

proptest! {
    #[test]
    fn no_window_admits_more_than_its_limit(steps in prop::collection::vec(step(), 1..200)) {
        let mut ledger = Ledger::new(LedgerConfig::root("g"));
        ledger.apply(Nanos(0), Command::PutPolicy(policy())).unwrap();
        let mut now = 0u64;
        // (key, window index) → units admitted net of refunds that went back into it.
        let mut net: BTreeMap<(u8, u64), u64> = BTreeMap::new();
        let mut last: Option<(u8, u64, Nanos)> = None;
        for s in steps {
            match s {
                Step::Wait { ns } => now += ns,
                Step::Decide { key, units } => {
                    let items = vec![DecideItem {
                        policy_id: "q".into(),
                        key: format!("q:k={key}"),
                        units,
                    }];
                    let Outcome::Decided(d) =
                        ledger.apply(Nanos(now), Command::Decide(Decide { items })).unwrap()
                    else {
                        panic!("not a decision");
                    };
                    let slot = net.entry((key, now / WINDOW_NS)).or_default();
                    if d.admitted {
                        *slot += units;
                        last = Some((key, units, d.at));
                    } else {
                        prop_assert!(*slot + units > LIMIT, "refused though {} + {units} fit", slot);
                    }
                    prop_assert!(*slot <= LIMIT, "window holds {} > {LIMIT}", slot);
                }
                Step::RefundLast => {
                    let Some((key, units, at)) = last.take() else { continue };
                    let refund = Refund {
                        items: vec![DecideItem {
                            policy_id: "q".into(),
                            key: format!("q:k={key}"),
                            units,
                        }],
                        decided_at: at,
                    };
                    let Outcome::Refunded { units: back } =
                        ledger.apply(Nanos(now), Command::Refund(refund)).unwrap()
                    else {
                        panic!("not a refund");
                    };
                    let same_window = at.0 / WINDOW_NS == now / WINDOW_NS;
                    prop_assert!(same_window || back == 0, "refunded {back} into a later window");
                    let slot = net.entry((key, at.0 / WINDOW_NS)).or_default();
                    *slot -= back;
                }
            }
            prop_assert!(ledger.conserved());
        }
    }
}
