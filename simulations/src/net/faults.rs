//! The fault schedule of a networked run, drawn from the seed before the run starts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Most faults one run may schedule.
pub const FAULTS_MAX: usize = 64;

/// One change to the simulated world, applied between simulation steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Cuts both directions between an agent and every allocator host.
    Partition { agent: usize },
    /// Restores them.
    Repair { agent: usize },
    /// Sets the longest one-way delay of every link, in milliseconds.
    MaxLatency { latency_ms: u64 },
    /// Kills an agent's software; it loses everything it held in memory.
    Crash { agent: usize },
    /// Starts a crashed agent's software again, with what its disk holds (its state file,
    /// when the run gives agents one).
    Restart { agent: usize },
    /// Kills the allocator host that leads at that moment (Raft clusters only); it keeps
    /// only what its storage holds.
    CrashLeader,
    /// Starts every crashed allocator host again, from its own storage.
    RestartAllocators,
    /// Cuts an allocator host off from the other allocator hosts (agents still reach it).
    IsolateAllocator { node: usize },
    /// Reconnects it.
    RejoinAllocator { node: usize },
    /// Cuts the delegated region off from every global allocator host.
    PartitionRegion,
    /// Reconnects it.
    RepairRegion,
    /// Sets how far an agent host's clocks are off the simulation's, in milliseconds
    /// (negative: behind). Each step fault sets an offset and later sets it back to zero.
    ClockOffset { agent: usize, offset_ms: i64 },
}

impl Action {
    /// Whether the action faults or restarts an allocator host.
    pub fn is_allocator_fault(&self) -> bool {
        matches!(
            self,
            Action::CrashLeader
                | Action::RestartAllocators
                | Action::IsolateAllocator { .. }
                | Action::RejoinAllocator { .. }
        )
    }
}

/// An action and when it happens, in milliseconds of simulated time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub at_ms: u64,
    pub action: Action,
}

/// What the schedule is drawn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    /// Faults to draw; each is one of the enabled kinds, with its repair.
    pub faults: usize,
    pub agents: usize,
    /// Allocator hosts; with more than one, leader crashes and allocator isolations are
    /// drawn too.
    pub allocators: usize,
    /// Faults start after this and are repaired before `end_ms`.
    pub start_ms: u64,
    pub end_ms: u64,
    /// Longest partition or outage, in milliseconds.
    pub outage_ms_max: u64,
    /// Highest one-way latency a latency fault sets, in milliseconds.
    pub latency_ms_max: u64,
    /// The latency restored after a latency fault, in milliseconds.
    pub latency_ms_base: u64,
    /// Largest clock step at an agent host, in milliseconds; zero draws no clock steps.
    pub clock_step_ms_max: u64,
    /// Whether a delegated region runs, so that cuts between it and the global allocators
    /// are drawn.
    pub region: bool,
}

/// The kinds of fault a spec enables, in drawing order. The first three are always there,
/// so a spec without allocator faults or clock steps draws the schedule it always did.
fn kinds(spec: &FaultSpec) -> Vec<u8> {
    let mut out = vec![0, 1, 2];
    if spec.allocators > 1 {
        out.extend([3, 4]);
    }
    if spec.clock_step_ms_max > 0 {
        out.push(5);
    }
    if spec.region {
        out.push(6);
    }
    out
}

/// The actions of `spec` drawn from `seed`, in time order (ties keep drawing order).
pub fn schedule(seed: u64, spec: &FaultSpec) -> Vec<Scheduled> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    let agents = spec.agents.max(1);
    let span_ms = spec.end_ms.saturating_sub(spec.start_ms).max(1);
    let kinds = kinds(spec);
    for _ in 0..spec.faults.min(FAULTS_MAX) {
        let at_ms = spec.start_ms + rng.random_range(0..span_ms);
        let outage_ms = rng.random_range(1..=spec.outage_ms_max.max(1));
        let end_ms = (at_ms + outage_ms).min(spec.end_ms);
        let agent = rng.random_range(0..agents);
        let (begin, finish) = match kinds[rng.random_range(0..kinds.len())] {
            0 => (Action::Partition { agent }, Action::Repair { agent }),
            1 => (
                Action::MaxLatency {
                    latency_ms: rng.random_range(1..=spec.latency_ms_max.max(1)),
                },
                Action::MaxLatency {
                    latency_ms: spec.latency_ms_base,
                },
            ),
            2 => (Action::Crash { agent }, Action::Restart { agent }),
            3 => (Action::CrashLeader, Action::RestartAllocators),
            4 => {
                let node = rng.random_range(0..spec.allocators);
                (
                    Action::IsolateAllocator { node },
                    Action::RejoinAllocator { node },
                )
            }
            6 => (Action::PartitionRegion, Action::RepairRegion),
            _ => {
                let step_ms = rng.random_range(1..=spec.clock_step_ms_max) as i64;
                let offset_ms = if rng.random_bool(0.5) {
                    -step_ms
                } else {
                    step_ms
                };
                (
                    Action::ClockOffset { agent, offset_ms },
                    Action::ClockOffset {
                        agent,
                        offset_ms: 0,
                    },
                )
            }
        };
        out.push(Scheduled {
            at_ms,
            action: begin,
        });
        out.push(Scheduled {
            at_ms: end_ms,
            action: finish,
        });
    }
    out.sort_by_key(|s| s.at_ms);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> FaultSpec {
        FaultSpec {
            faults: 6,
            agents: 3,
            start_ms: 1_000,
            end_ms: 8_000,
            outage_ms_max: 2_000,
            latency_ms_max: 200,
            latency_ms_base: 5,
            allocators: 1,
            clock_step_ms_max: 0,
            region: false,
        }
    }

    #[test]
    fn a_seed_gives_one_schedule_within_its_span() {
        let a = schedule(7, &spec());
        assert_eq!(a, schedule(7, &spec()));
        assert_ne!(a, schedule(8, &spec()));
        assert_eq!(a.len(), 12);
        assert!(a.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(a.iter().all(|s| (1_000..=8_000).contains(&s.at_ms)));
    }

    #[test]
    fn every_fault_is_undone() {
        for seed in 0..200 {
            let mut down = [0i32; 3];
            for s in schedule(seed, &spec()) {
                match s.action {
                    Action::Crash { agent } => down[agent] += 1,
                    Action::Restart { agent } => down[agent] -= 1,
                    _ => {}
                }
            }
            assert_eq!(down, [0; 3], "seed {seed}");
        }
    }

    #[test]
    fn cluster_and_clock_faults_are_drawn_only_when_enabled() {
        let plain = spec();
        let all = FaultSpec {
            faults: 40,
            allocators: 3,
            clock_step_ms_max: 4_000,
            region: true,
            ..plain
        };
        let drawn = schedule(3, &all);
        let has = |f: fn(&Action) -> bool| drawn.iter().any(|s| f(&s.action));
        assert!(has(|a| matches!(a, Action::CrashLeader)));
        assert!(has(|a| matches!(a, Action::PartitionRegion)));
        assert!(has(
            |a| matches!(a, Action::IsolateAllocator { node } if *node < 3)
        ));
        assert!(has(
            |a| matches!(a, Action::ClockOffset { offset_ms, .. } if *offset_ms < 0)
        ));
        assert!(has(
            |a| matches!(a, Action::ClockOffset { offset_ms, .. } if *offset_ms > 0)
        ));
        assert!(drawn.iter().all(|s| match s.action {
            Action::ClockOffset { offset_ms, .. } => offset_ms.unsigned_abs() <= 4_000,
            _ => true,
        }));
        for seed in 0..100 {
            let only_agents = schedule(
                seed,
                &FaultSpec {
                    faults: 40,
                    ..plain
                },
            );
            assert!(only_agents.iter().all(|s| !s.action.is_allocator_fault()
                && !matches!(
                    s.action,
                    Action::ClockOffset { .. } | Action::PartitionRegion
                )));
        }
    }
}
