//! Properties of holder-side leases under random schedules:
//! * credit safety: spent ≤ the most credit ever granted minus what was handed back, and no
//!   spend succeeds at or after the deadline or once the lease was closed, released,
//!   revoked or seen expired — whatever renewals (valid or not), returns, reports and clock
//!   steps (backwards too) come in between;
//! * clock safety: with a holder clock running anywhere within the declared drift of real
//!   time, the holder stops spending no later than the grantor's expiry.

use leasehold_common::lease::{
    Demand, HeldLease, HolderConfig, Lease, LeaseState, RenewalError, SpendError,
};
use leasehold_common::time::Nanos;
use proptest::prelude::*;
use proptest::sample::Index;

const MS: u64 = 1_000_000;
const PPM: i128 = 1_000_000;

fn lease(credit: u64, ttl_ms: u64) -> Lease {
    Lease {
        lease_id: 11,
        grantor_id: "global".into(),
        policy_id: "api".into(),
        policy_version: 2,
        key: "route=/pay".into(),
        holder_id: "region-us".into(),
        credit,
        epoch: 5,
        issued_at_ns: 0,
        ttl_ms,
        generation: 1,
        parent_lease_id: Some(3),
        key_id: String::new(),
        signature: Vec::new(),
    }
}

#[derive(Clone, Debug)]
enum RenewKind {
    Honest,
    WrongId,
    StaleGeneration,
    BelowSpent,
    OldEpoch,
}

#[derive(Clone, Debug)]
enum Op {
    Spend {
        units: u64,
        dt_ms: i64,
    },
    /// Spends everything the holder says is spendable, so any overstatement shows.
    Drain {
        dt_ms: i64,
    },
    Step {
        dt_ms: i64,
    },
    Return {
        units: u64,
    },
    Report,
    /// The grantor answers report `answer`, having also seen the reports up to `seen`.
    Renew {
        answer: Index,
        seen: Index,
        extra: u64,
        ttl_ms: u64,
        kind: RenewKind,
    },
    Revoke,
    Close,
    Release,
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        6 => Just(RenewKind::Honest),
        1 => Just(RenewKind::WrongId),
        1 => Just(RenewKind::StaleGeneration),
        1 => Just(RenewKind::BelowSpent),
        1 => Just(RenewKind::OldEpoch),
    ];
    prop_oneof![
        12 => (0u64..40, -20i64..300).prop_map(|(units, dt_ms)| Op::Spend { units, dt_ms }),
        3 => (-20i64..300).prop_map(|dt_ms| Op::Drain { dt_ms }),
        3 => (-3_000i64..4_000).prop_map(|dt_ms| Op::Step { dt_ms }),
        3 => (0u64..60).prop_map(|units| Op::Return { units }),
        4 => Just(Op::Report),
        5 => (any::<Index>(), any::<Index>(), 0u64..200, 0u64..8_000, kind).prop_map(
            |(answer, seen, extra, ttl_ms, kind)| Op::Renew { answer, seen, extra, ttl_ms, kind }
        ),
        1 => Just(Op::Revoke),
        1 => Just(Op::Close),
        1 => Just(Op::Release),
    ]
}

/// What the test knows independently of the holder.
struct Model {
    config: HolderConfig,
    /// The driver's raw clock reading (may go back); `latest` is the newest one fed to the
    /// holder.
    now: u64,
    latest: u64,
    first_sent: Nanos,
    /// Reports as sent: raw reading and the cumulative return they carried.
    reports: Vec<(Nanos, u64)>,
    /// Largest gross credit the grantor ever granted (before subtracting returns).
    gross_max: u64,
    generation: u64,
    epoch: u64,
    deadline: Nanos,
    spent: u64,
    returned: u64,
    /// Closed, released, revoked, or seen at/after its deadline: spending is over for good.
    ended: bool,
}

impl Model {
    fn new(config: HolderConfig, credit: u64, ttl_ms: u64, start: u64) -> Model {
        Model {
            config,
            now: start,
            latest: start,
            first_sent: Nanos(start),
            reports: Vec::new(),
            gross_max: credit,
            generation: 1,
            epoch: 5,
            deadline: config.deadline(Nanos(start), ttl_ms),
            spent: 0,
            returned: 0,
            ended: false,
        }
    }

    fn step(&mut self, dt_ms: i64) {
        self.now = self.now.saturating_add_signed(dt_ms * MS as i64);
    }

    /// The current reading is fed to the holder: time never goes back for it, and a
    /// reading at or past the deadline ends the lease.
    fn feed(&mut self) {
        self.latest = self.latest.max(self.now);
        if self.latest >= self.deadline.0 {
            self.ended = true;
        }
    }
}

fn run_op(h: &mut HeldLease, m: &mut Model, op: Op) -> Result<(), TestCaseError> {
    match op {
        Op::Spend { units, dt_ms } => {
            m.step(dt_ms);
            let spendable = h.spendable(Nanos(m.now));
            let res = h.try_spend(units, Nanos(m.now));
            m.feed();
            match res {
                Ok(()) => {
                    prop_assert!(!m.ended, "spent after the lease ended");
                    prop_assert!(m.latest < m.deadline.0, "spent at/after the deadline");
                    prop_assert!(units <= spendable);
                    m.spent += units;
                }
                Err(SpendError::InsufficientCredit {
                    requested,
                    available,
                }) => {
                    prop_assert!(!m.ended);
                    prop_assert_eq!((requested, available), (units, spendable));
                    prop_assert!(units > spendable);
                }
                Err(_) => prop_assert!(m.ended, "refused while active: {:?}", res),
            }
        }
        Op::Drain { dt_ms } => {
            m.step(dt_ms);
            let units = h.spendable(Nanos(m.now));
            return run_op(h, m, Op::Spend { units, dt_ms: 0 });
        }
        Op::Step { dt_ms } => m.step(dt_ms),
        Op::Return { units } => {
            let unspent = h.ceiling().saturating_sub(h.spent());
            let amount = h.prepare_return(units);
            prop_assert_eq!(amount, if m.ended { 0 } else { units.min(unspent) });
            m.returned += amount;
        }
        Op::Report => {
            let r = h.report(Nanos(m.now), Demand::from_units_per_s(20));
            m.feed();
            prop_assert_eq!((r.used, r.return_credit), (m.spent, m.returned));
            prop_assert_eq!(r.final_usage, h.state() != LeaseState::Active);
            m.reports.push((Nanos(m.now), r.return_credit));
        }
        Op::Renew {
            answer,
            seen,
            extra,
            ttl_ms,
            kind,
        } => renew(h, m, answer, seen, extra, ttl_ms, kind)?,
        Op::Revoke => {
            h.mark_revoked();
            m.ended = true;
        }
        Op::Close => {
            prop_assert_eq!(h.close_for_release(), m.spent);
            m.ended = true;
        }
        Op::Release => {
            h.close_for_replacement();
            h.mark_released();
            m.ended = true;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn renew(
    h: &mut HeldLease,
    m: &mut Model,
    answer: Index,
    seen: Index,
    extra: u64,
    ttl_ms: u64,
    kind: RenewKind,
) -> Result<(), TestCaseError> {
    // An honest grantor: gross credit only grows, and the credit it signs subtracts the
    // largest cumulative return among the reports it has received (at least the answered one).
    let (sent_at, seen_returned) = if m.reports.is_empty() {
        (m.first_sent, 0)
    } else {
        let k = answer.index(m.reports.len());
        let j = k + seen.index(m.reports.len() - k);
        (m.reports[k].0, m.reports[j].1)
    };
    let gross = m.gross_max + extra;
    let mut new = lease(gross - seen_returned, ttl_ms);
    new.generation = m.generation + 1 + extra % 3;
    new.epoch = m.epoch + extra % 2;
    match kind {
        RenewKind::Honest => {}
        RenewKind::WrongId => new.lease_id += 1,
        RenewKind::StaleGeneration => new.generation = m.generation - extra % 2,
        RenewKind::BelowSpent if m.spent > 0 => new.credit = m.spent - 1,
        RenewKind::BelowSpent => return Ok(()),
        RenewKind::OldEpoch => new.epoch = m.epoch - 1,
    }
    let before = (h.deadline(), h.ceiling(), h.lease().clone());
    let generation = new.generation;
    let res = h.apply_renewal(new, sent_at);
    match (&kind, res) {
        (_, Err(RenewalError::NotActive { .. })) => prop_assert!(m.ended),
        (RenewKind::Honest, Ok(())) => {
            prop_assert!(!m.ended, "renewed after the lease ended");
            m.gross_max = gross;
            m.generation = generation;
            m.epoch = h.lease().epoch;
            m.deadline = m.config.deadline(sent_at, ttl_ms);
            if m.returned == 0 {
                prop_assert_eq!(h.ceiling(), h.lease().credit, "nothing to withhold");
            }
        }
        (kind, res) => {
            let expected = match kind {
                RenewKind::Honest => false,
                RenewKind::WrongId => matches!(res, Err(RenewalError::WrongLeaseId { .. })),
                RenewKind::StaleGeneration => {
                    matches!(res, Err(RenewalError::StaleGeneration { .. }))
                }
                RenewKind::BelowSpent => matches!(res, Err(RenewalError::CreditBelowSpent { .. })),
                RenewKind::OldEpoch => matches!(res, Err(RenewalError::StaleEpoch { .. })),
            };
            prop_assert!(!m.ended && expected, "{:?} gave {:?}", kind, res);
            prop_assert_eq!((h.deadline(), h.ceiling(), h.lease().clone()), before);
        }
    }
    Ok(())
}

fn check_invariants(h: &HeldLease, m: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(h.spent(), m.spent);
    prop_assert_eq!(h.returned(), m.returned);
    prop_assert!(
        m.spent + m.returned <= m.gross_max,
        "spent {} + returned {} > most ever granted {}",
        m.spent,
        m.returned,
        m.gross_max
    );
    prop_assert!(h.spent() <= h.lease().credit);
    prop_assert_eq!(h.deadline(), m.deadline);
    if m.ended {
        prop_assert_eq!(h.spendable(Nanos(m.now)), 0);
    }
    Ok(())
}

fn config() -> impl Strategy<Value = HolderConfig> {
    (0u32..=100_000, 0u64..=500, 1usize..=8).prop_map(|(drift, margin, reports)| HolderConfig {
        max_drift_ppm: drift,
        safety_margin_ms: margin,
        reports_tracked_max: reports,
        ..HolderConfig::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn credit_is_never_overspent_nor_spent_after_the_end(
        config in config(),
        credit in 0u64..300,
        ttl_ms in 0u64..8_000,
        start in 0u64..1_000_000_000_000,
        ops in proptest::collection::vec(op(), 1..64),
    ) {
        let mut h = HeldLease::new(lease(credit, ttl_ms), Nanos(start), config).unwrap();
        let mut m = Model::new(config, credit, ttl_ms, start);
        for op in ops {
            run_op(&mut h, &mut m, op)?;
            check_invariants(&h, &m)?;
        }
    }
}

/// A holder clock over real time: piecewise constant rates, each within `±max_drift_ppm`.
/// Holder time is `origin + ⌊Σ rate_ppm × real_ns / 10⁶⌋`, exact over the whole history.
#[derive(Clone, Debug)]
struct DriftingClock {
    origin: u64,
    /// (real length in ns, rate error in ppm); the last segment runs on forever.
    segments: Vec<(u64, i64)>,
}

impl DriftingClock {
    fn at(&self, real_ns: u64) -> Nanos {
        let mut acc: i128 = 0;
        let mut left = real_ns;
        for (i, &(len, err)) in self.segments.iter().enumerate() {
            let last = i + 1 == self.segments.len();
            let span = if last { left } else { left.min(len) };
            acc += i128::from(span) * (PPM + i128::from(err));
            left -= span;
        }
        Nanos(self.origin + u64::try_from(acc / PPM).unwrap())
    }
}

fn drifting_clock(drift_ppm: u32) -> impl Strategy<Value = DriftingClock> {
    // Errors at the bounds are the interesting cases, so they are drawn often.
    let p = i64::from(drift_ppm);
    let err = prop_oneof![Just(-p), Just(p), -p..=p];
    (
        0u64..1 << 50,
        proptest::collection::vec((1u64..5_000 * MS, err), 1..6),
    )
        .prop_map(|(origin, segments)| DriftingClock { origin, segments })
}

fn clock_case() -> impl Strategy<Value = (HolderConfig, DriftingClock)> {
    let drift = prop_oneof![Just(0u32), Just(100_000u32), 0u32..=100_000];
    let margin = prop_oneof![Just(0u64), 0u64..=200];
    (drift, margin).prop_flat_map(|(drift, margin)| {
        let config = HolderConfig {
            max_drift_ppm: drift,
            safety_margin_ms: margin,
            ..HolderConfig::default()
        };
        (Just(config), drifting_clock(drift))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    /// The grantor reclaims at real `grant + ttl`; by then the holder has stopped. Checked
    /// for a first grant and for a renewal answering a later report.
    #[test]
    fn holder_stops_no_later_than_the_grantor(
        (config, clock) in clock_case(),
        send_ms in 0u64..20_000,
        grant_delay_ns in prop_oneof![Just(0u64), 0u64..2_000 * MS],
        ttl_ms in prop_oneof![1u64..10, 1u64..120_000],
        report_frac in 0u64..=1_000,
        grant2_delay_ns in prop_oneof![Just(0u64), 0u64..2_000 * MS],
        ttl2_ms in prop_oneof![1u64..10, 1u64..120_000],
    ) {
        let send = send_ms * MS;
        let reclaim = send + grant_delay_ns + ttl_ms * MS;
        let mut first = HeldLease::new(lease(10, ttl_ms), clock.at(send), config).unwrap();
        prop_assert!(first.is_expired(clock.at(reclaim)));
        prop_assert_eq!(first.spendable(clock.at(reclaim)), 0);
        prop_assert!(first.try_spend(0, clock.at(reclaim)).is_err());

        // Renewal: a report sent partway through the first version's life.
        let mut h = HeldLease::new(lease(10, ttl_ms), clock.at(send), config).unwrap();
        let send2 = send + ttl_ms * MS * report_frac / 1_000;
        if clock.at(send2) < h.deadline() {
            let _ = h.report(clock.at(send2), Demand::ZERO);
            let mut next = lease(20, ttl2_ms);
            next.generation = 2;
            h.apply_renewal(next, clock.at(send2)).unwrap();
            let reclaim2 = send2 + grant2_delay_ns + ttl2_ms * MS;
            prop_assert!(h.is_expired(clock.at(reclaim2)));
            prop_assert!(h.try_spend(0, clock.at(reclaim2)).is_err());
        }
    }
}

#[test]
fn slowest_clock_without_margin_is_cut_exactly_at_the_grantor_expiry() {
    // The bound is tight: at the slowest allowed rate and with no margin, the holder's last
    // spendable nanosecond is just before the grantor's expiry, so any shorter allowance for
    // drift would let it spend past it.
    let config = HolderConfig {
        max_drift_ppm: 1_000,
        safety_margin_ms: 0,
        ..HolderConfig::default()
    };
    let clock = DriftingClock {
        origin: 0,
        segments: vec![(1, -1_000)],
    };
    let ttl_ms = 10_000;
    let h = HeldLease::new(lease(10, ttl_ms), clock.at(0), config).unwrap();
    let reclaim = ttl_ms * MS;
    assert!(h.is_expired(clock.at(reclaim)));
    assert!(!h.is_expired(clock.at(reclaim - 1_010)));
    let unshortened = HolderConfig {
        max_drift_ppm: 0,
        ..config
    };
    let naive = HeldLease::new(lease(10, ttl_ms), clock.at(0), unshortened).unwrap();
    assert!(
        !naive.is_expired(clock.at(reclaim)),
        "without the drift allowance it overruns"
    );
}
