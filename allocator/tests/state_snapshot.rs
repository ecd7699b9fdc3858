//! The allocator's whole replicated state survives a snapshot: whatever commands built it
//! (policies of every kind and their versions, budgets, rates, emergency switches, leases,
//! shadow counts, audit and watch events), restoring its snapshot gives an equal state, and
//! the restored replica goes on exactly as the original does.

use std::sync::Arc;

use leasehold_allocator::raft::machine::{MachineApplier, SharedMachine};
use leasehold_allocator::raft::time::SystemTimeSource;
use leasehold_allocator::replica::Machine;
use leasehold_allocator::state::{AllocatorState, Emergency, EmergencyMode, StateCommand};
use leasehold_allocator::storage::Applier;
use leasehold_common::ledger::{Acquire, Command, HolderCounts, LedgerConfig, Release, Report};
use leasehold_common::time::Nanos;
use proptest::collection::vec;
use proptest::prelude::*;

/// Every algorithm, every optional part of a policy, and awkward text.
const DOCS: &[&str] = &[
    "id: tb\ndimensions: [{name: tenant, lowercase: true, max_len: 64}]\nrate: {units: 100, per: 1s}\nburst: 200\nlease: {ttl: 5s, refresh_horizon: 500ms, reserve_fraction: 0.1, max_credit: 50}\n",
    "id: tb\ndescription: \"second: \\\"quoted\\\" — ünïcode\"\nrate: {units: 10, per: 1s}\nfailure: {mode: restricted, min_priority: 2, rate: {units: 1, per: 1s}}\npriority_classes: [{name: gold, priority: 5, weight: 3, borrow: true}]\n",
    "id: gcra\nalgorithm: gcra\nrate: {units: 50, per: 1s}\nburst: 5\nfailure: {mode: fail_open}\nlease: {reserve_fraction: \"12.5%\"}\n",
    "id: fw\nalgorithm: fixed_window\nrate: {units: 10, per: 1h}\ncost: {unit: weighted, default: 2, routes: {/a: 3}}\ndimensions: [{name: route, values: [/a, /b]}]\n",
    "id: sw\nalgorithm: sliding_window\nrate: {units: 10, per: 1m}\nmode: shadow\n",
    "id: cq\nalgorithm: calendar_quota\ncalendar: {period: month, time_zone: Europe/Berlin, units: 1000}\neffective_at: 2026-12-01T00:00:00.5Z\n",
    "id: cc\nalgorithm: concurrency\nconcurrency: {max_in_flight: 2}\nscope: process\nkill_switch: true\n",
    "# envoyproxy/ratelimit\ndomain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
];

const POLICY_IDS: &[&str] = &[
    "tb",
    "gcra",
    "fw",
    "sw",
    "cq",
    "cc",
    "ratelimit-edge",
    "missing",
];

#[derive(Clone, Debug)]
enum Op {
    Apply {
        doc: usize,
        shadow: bool,
        delay_ms: Option<u16>,
    },
    Mirror {
        doc: usize,
        upstream_version: u64,
    },
    Rollback {
        policy: usize,
        to_version: u64,
    },
    SetRate {
        policy: usize,
        rate_milli: u64,
        burst: u64,
    },
    Split {
        policy: usize,
        weights: Vec<(u8, u64)>,
        reserve_ppm: Option<u64>,
    },
    Emergency {
        policy: usize,
        mode: u8,
        min_priority: u32,
        rate_milli: u64,
    },
    Acquire {
        policy: usize,
        holder: u8,
        key: u8,
        want: u64,
        priority: u32,
    },
    Report {
        lease: usize,
        used: u64,
        returned: u64,
        want: u64,
        would_deny: u64,
    },
    Release {
        lease: usize,
        used: u64,
    },
    Revoke {
        lease: usize,
    },
    Tick,
    Advance {
        ms: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let policy = 0..POLICY_IDS.len();
    prop_oneof![
        3 => (0..DOCS.len(), any::<bool>(), proptest::option::of(any::<u16>()))
            .prop_map(|(doc, shadow, delay_ms)| Op::Apply { doc, shadow, delay_ms }),
        1 => (0..DOCS.len(), 1u64..5).prop_map(|(doc, upstream_version)| Op::Mirror { doc, upstream_version }),
        1 => (policy.clone(), 0u64..4).prop_map(|(policy, to_version)| Op::Rollback { policy, to_version }),
        1 => (policy.clone(), 0u64..1_000_000, 0u64..1_000)
            .prop_map(|(policy, rate_milli, burst)| Op::SetRate { policy, rate_milli, burst }),
        1 => (policy.clone(), vec((0u8..4, 0u64..10), 0..3), proptest::option::of(0u64..1_100_000))
            .prop_map(|(policy, weights, reserve_ppm)| Op::Split { policy, weights, reserve_ppm }),
        1 => (policy.clone(), 0u8..3, 0u32..10, 0u64..100_000).prop_map(
            |(policy, mode, min_priority, rate_milli)| Op::Emergency { policy, mode, min_priority, rate_milli }),
        4 => (policy, 0u8..3, 0u8..4, 0u64..80, 0u32..3).prop_map(
            |(policy, holder, key, want, priority)| Op::Acquire { policy, holder, key, want, priority }),
        3 => (any::<usize>(), 0u64..60, 0u64..20, 0u64..40, 0u64..3).prop_map(
            |(lease, used, returned, want, would_deny)| Op::Report { lease, used, returned, want, would_deny }),
        1 => (any::<usize>(), 0u64..60).prop_map(|(lease, used)| Op::Release { lease, used }),
        1 => any::<usize>().prop_map(|lease| Op::Revoke { lease }),
        2 => Just(Op::Tick),
        2 => (0u32..8_000).prop_map(|ms| Op::Advance { ms }),
    ]
}

struct Run {
    state: AllocatorState,
    now: Nanos,
    request_id: u64,
}

impl Run {
    fn lease(&self, pick: usize) -> Option<(String, u64)> {
        let leases: Vec<_> = self.state.ledger().leases().collect();
        let record = leases.get(pick % leases.len().max(1))?;
        Some((record.lease.holder_id.clone(), record.lease.lease_id))
    }

    fn command(&mut self, op: &Op) -> Option<StateCommand> {
        self.request_id += 1;
        let request_id = self.request_id;
        let actor = "admin/ops".to_owned();
        let id = |p: usize| POLICY_IDS[p].to_owned();
        Some(match op.clone() {
            Op::Apply {
                doc,
                shadow,
                delay_ms,
            } => StateCommand::ApplyPolicy {
                yaml: DOCS[doc].into(),
                shadow,
                effective_at_ns: delay_ms.map_or(0, |ms| self.now.0 + u64::from(ms) * 1_000_000),
                actor,
            },
            Op::Mirror {
                doc,
                upstream_version,
            } => StateCommand::MirrorPolicy {
                yaml: DOCS[doc].into(),
                upstream_version,
                actor,
            },
            Op::Rollback { policy, to_version } => StateCommand::RollbackPolicy {
                policy_id: id(policy),
                to_version,
                actor,
            },
            Op::SetRate {
                policy,
                rate_milli,
                burst,
            } => StateCommand::SetRate {
                policy_id: id(policy),
                rate_milli_per_sec: rate_milli,
                burst,
                actor,
            },
            Op::Split {
                policy,
                weights,
                reserve_ppm,
            } => StateCommand::SplitBudget {
                policy_id: id(policy),
                weights: weights
                    .into_iter()
                    .map(|(h, w)| (format!("agent/{h}"), w))
                    .collect(),
                reserve_ppm,
                actor,
            },
            Op::Emergency {
                policy,
                mode,
                min_priority,
                rate_milli,
            } => StateCommand::SetEmergency {
                emergency: Emergency {
                    policy_id: id(policy),
                    mode: [
                        EmergencyMode::Normal,
                        EmergencyMode::FailOpen,
                        EmergencyMode::Restricted,
                    ][usize::from(mode)],
                    min_priority,
                    restricted_rate_milli_per_sec: rate_milli,
                },
                reason: "drill".into(),
                actor,
            },
            Op::Acquire {
                policy,
                holder,
                key,
                want,
                priority,
            } => StateCommand::acquire(
                Acquire {
                    holder_id: format!("agent/{holder}"),
                    policy_id: id(policy),
                    key: format!("{}|t{key}", id(policy)),
                    want_credit: want,
                    demand_milli_per_sec: want * 500,
                    request_id,
                    priority,
                },
                // Refusals made without a lease ride on some acquires.
                HolderCounts {
                    refused: want % 3,
                    ..HolderCounts::default()
                },
            ),
            Op::Report {
                lease,
                used,
                returned,
                want,
                would_deny,
            } => {
                let (holder_id, lease_id) = self.lease(lease)?;
                let report = Report {
                    holder_id,
                    lease_id,
                    used,
                    return_credit: returned,
                    want_credit: want,
                    demand_milli_per_sec: 0,
                    request_id,
                    priority: 0,
                };
                // Holder counts ride along so snapshots carry usage rows too.
                let counts = HolderCounts {
                    refused: used / 2,
                    shaped: 0,
                    fail_open: would_deny,
                };
                StateCommand::report(report, would_deny, counts)
            }
            Op::Release { lease, used } => {
                let (holder_id, lease_id) = self.lease(lease)?;
                let release = Release {
                    holder_id,
                    lease_id,
                    final_used: used,
                    request_id,
                };
                let counts = HolderCounts {
                    refused: used % 3,
                    ..HolderCounts::default()
                };
                StateCommand::release(release, counts)
            }
            Op::Revoke { lease } => StateCommand::Revoke {
                lease_id: self.lease(lease)?.1,
                reason: "drill".into(),
                actor,
            },
            Op::Tick => StateCommand::Ledger(Command::Tick),
            Op::Advance { ms } => {
                self.now = Nanos(self.now.0 + u64::from(ms) * 1_000_000);
                return None;
            }
        })
    }
}

fn applier() -> MachineApplier<AllocatorState> {
    let state = AllocatorState::new(LedgerConfig::root("global"));
    MachineApplier::new(
        Arc::new(SharedMachine::new(state)),
        SystemTimeSource::shared(),
    )
}

fn restored(snapshot: &[u8]) -> AllocatorState {
    let shared = Arc::new(SharedMachine::new(AllocatorState::new(LedgerConfig::root(
        "other",
    ))));
    let mut a = MachineApplier::new(shared.clone(), SystemTimeSource::shared());
    a.restore(snapshot)
        .expect("a snapshot of any state restores");
    let state = shared.read().clone();
    state
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn any_state_restores_from_its_snapshot_and_goes_on_alike(
        ops in vec(op(), 1..120),
        after in vec(op(), 0..30),
    ) {
        let mut run = Run { state: AllocatorState::new(LedgerConfig::root("global")), now: Nanos(1_000_000_000), request_id: 0 };
        // Two leased policies first, so that most runs hold leases too.
        let start = [Op::Apply { doc: 0, shadow: false, delay_ms: None }, Op::Apply { doc: 2, shadow: false, delay_ms: None }];
        for op in start.iter().chain(&ops) {
            if let Some(c) = run.command(op) {
                run.state.apply(run.now, c);
            }
        }
        let bytes = leasehold_allocator::raft::machine::encode_snapshot(&run.state, run.now.0).unwrap();
        let mut twin = Run { state: restored(&bytes), now: run.now, request_id: run.request_id };
        prop_assert_eq!(&twin.state, &run.state);
        for op in &after {
            let (a, b) = (run.command(op), twin.command(op));
            prop_assert_eq!(&a, &b);
            if let (Some(a), Some(b)) = (a, b) {
                prop_assert_eq!(run.state.apply(run.now, a), twin.state.apply(twin.now, b));
            }
        }
        prop_assert_eq!(&twin.state, &run.state);
    }
}

#[test]
fn a_state_with_every_policy_kind_restores_through_the_applier() {
    let mut a = applier();
    for (i, doc) in DOCS.iter().enumerate() {
        let cmd = StateCommand::ApplyPolicy {
            yaml: (*doc).into(),
            shadow: false,
            effective_at_ns: 0,
            actor: "admin/ops".into(),
        };
        let payload = leasehold_allocator::raft::machine::encode_batch(&[cmd]).unwrap();
        a.apply(i as u64 + 1, 1_000 + i as u64, &payload);
    }
    let snapshot = a.snapshot();
    let state = restored(&snapshot);
    assert_eq!(state.policies().len(), 7);
    assert_eq!(
        state
            .ledger()
            .policies()
            .filter(|p| p.policy_id.starts_with("envoy-edge-"))
            .count(),
        1,
        "the domain's rule is in the restored ledger"
    );
    assert!(state.audit().count() >= DOCS.len());
    assert_eq!(state.policies().get("tb").map(|v| v.version), Some(2));
}
