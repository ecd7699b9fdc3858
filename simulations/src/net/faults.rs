//! The fault schedule of a networked run, drawn from the seed before the run starts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Most faults one run may schedule.
pub const FAULTS_MAX: usize = 64;

/// One change to the simulated world, applied between simulation steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Cuts both directions between an agent and the allocator.
    Partition { agent: usize },
    /// Restores them.
    Repair { agent: usize },
    /// Sets the longest one-way delay of every link, in milliseconds.
    MaxLatency { latency_ms: u64 },
    /// Kills an agent's software; it loses everything it held in memory.
    Crash { agent: usize },
    /// Starts a crashed agent's software again from scratch.
    Restart { agent: usize },
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
    /// Faults to draw; each is a partition, a latency change or a crash, with its repair.
    pub faults: usize,
    pub agents: usize,
    /// Faults start after this and are repaired before `end_ms`.
    pub start_ms: u64,
    pub end_ms: u64,
    /// Longest partition or outage, in milliseconds.
    pub outage_ms_max: u64,
    /// Highest one-way latency a latency fault sets, in milliseconds.
    pub latency_ms_max: u64,
    /// The latency restored after a latency fault, in milliseconds.
    pub latency_ms_base: u64,
}

/// The actions of `spec` drawn from `seed`, in time order (ties keep drawing order).
pub fn schedule(seed: u64, spec: &FaultSpec) -> Vec<Scheduled> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    let agents = spec.agents.max(1);
    let span_ms = spec.end_ms.saturating_sub(spec.start_ms).max(1);
    for _ in 0..spec.faults.min(FAULTS_MAX) {
        let at_ms = spec.start_ms + rng.random_range(0..span_ms);
        let outage_ms = rng.random_range(1..=spec.outage_ms_max.max(1));
        let end_ms = (at_ms + outage_ms).min(spec.end_ms);
        let agent = rng.random_range(0..agents);
        let (begin, finish) = match rng.random_range(0..3u8) {
            0 => (Action::Partition { agent }, Action::Repair { agent }),
            1 => (
                Action::MaxLatency {
                    latency_ms: rng.random_range(1..=spec.latency_ms_max.max(1)),
                },
                Action::MaxLatency {
                    latency_ms: spec.latency_ms_base,
                },
            ),
            _ => (Action::Crash { agent }, Action::Restart { agent }),
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
}
