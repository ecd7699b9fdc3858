//! P3 for the ledger: a command stamped earlier than the last one is applied at the last
//! one's time, so a clock step back changes no outcome and mints nothing.

use leasehold_common::ledger::{
    Acquire, Command, LeaseParams, Ledger, LedgerConfig, PolicyParams, Report,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;

fn ledger() -> Ledger {
    let mut l = Ledger::new(LedgerConfig::root("g"));
    let params = PolicyParams {
        weights: Default::default(),
        window: None,
        owner: Default::default(),
        exact: false,
        policy_id: "p".into(),
        version: 1,
        rate: Rate::per_second(50).unwrap(),
        burst: 100,
        lease: LeaseParams {
            ttl_ms: 1_000,
            ..LeaseParams::default()
        },
    };
    l.apply(Nanos(0), Command::PutPolicy(params)).unwrap();
    l
}

fn command(kind: u8, n: u64) -> Command {
    match kind % 3 {
        0 => Command::Acquire(Acquire {
            holder_id: format!("h{}", n % 3),
            policy_id: "p".into(),
            key: "k".into(),
            want_credit: n % 70,
            demand_milli_per_sec: 0,
            request_id: n,
            priority: 0,
        }),
        1 => Command::Report(Report {
            holder_id: format!("h{}", n % 3),
            lease_id: 1 + n % 5,
            used: 0,
            return_credit: 0,
            want_credit: n % 40,
            demand_milli_per_sec: 0,
            request_id: n,
            priority: 0,
        }),
        _ => Command::Tick,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn stepping_the_clock_back_changes_nothing(
        steps in prop::collection::vec((0..3u8, -2_000i64..2_000), 1..80),
    ) {
        let (mut stepped, mut steady) = (ledger(), ledger());
        let (mut raw, mut max, mut behind) = (0i64, 0i64, 0u64);
        for (n, (kind, delta_ms)) in steps.iter().enumerate() {
            raw = (raw + delta_ms).max(0);
            if raw < max {
                behind += 1;
            }
            max = max.max(raw);
            let cmd = command(*kind, n as u64 + 1);
            let a = stepped.apply(Nanos(raw as u64 * 1_000_000), cmd.clone());
            let b = steady.apply(Nanos(max as u64 * 1_000_000), cmd);
            prop_assert_eq!(a, b);
        }
        prop_assert_eq!(stepped.accounts().collect::<Vec<_>>(), steady.accounts().collect::<Vec<_>>());
        prop_assert_eq!(stepped.clock_rollbacks().rollbacks, behind, "every reading behind is counted");
    }
}
