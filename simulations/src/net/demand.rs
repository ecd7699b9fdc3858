//! How the offered traffic of a networked run is spread over its agents and over time.
//!
//! Every round (`offer_every_ms`) the agents together offer `agents × offer_per_round`
//! requests; the demand shape says which share of them each agent gets. Each agent works
//! its share out on its own from the run's seed and the simulated time, so no host waits
//! on another, and a fractional share carries over to the next round instead of being
//! rounded away.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Most autoscaling steps one run may have.
pub const SCALE_STEPS_MAX: usize = 64;
/// Highest load a [`Demand::Load`] step may set, in percent of the configured round.
pub const LOAD_PCT_MAX: u32 = 100;
/// Parts per million: a share of the round's offers.
const PPM: u64 = 1_000_000;
/// Separates the hot-spot rng stream from the fault schedule's and turmoil's.
const HOT_SPOT_SALT: u64 = 0x7a69_7066_686f_7473;

/// How the round's offers are shared among agents.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Demand {
    /// Every agent offers the same share.
    #[default]
    Even,
    /// Only the first `active` agents offer, sharing the round evenly: from each
    /// `(from_ms, active)` on, until the next. Before the first step every agent offers.
    /// The total offered stays the same as instances come and go, as when a gateway
    /// autoscales under a steady load.
    Scaled { steps: Vec<(u64, usize)> },
    /// Shares follow Zipf's law with exponent `exponent_milli / 1000` over a ranking of the
    /// agents that is drawn afresh from the seed every `reshuffle_ms`: the hot spots move.
    Zipf {
        exponent_milli: u32,
        reshuffle_ms: u64,
    },
    /// Every agent offers the same share, but the round shrinks to `load_pct` percent of
    /// its configured size from each `(from_ms, load_pct)` on, until the next; the full
    /// round before the first step. Demand rises above and falls below the policy's rate,
    /// so holders alternate between spending credit as it arrives and holding it unspent.
    Load { steps: Vec<(u64, u32)> },
}

impl Demand {
    /// Agents offering at `at_ms`, for an autoscaled run; every agent otherwise.
    pub fn active_at(&self, at_ms: u64, agents: usize) -> usize {
        match self {
            Demand::Scaled { steps } => steps
                .iter()
                .rev()
                .find(|(from_ms, _)| *from_ms <= at_ms)
                .map_or(agents, |(_, active)| (*active).min(agents)),
            _ => agents,
        }
    }

    /// Agent `agent`'s share of the round at `at_ms`, in parts per million.
    pub fn share_ppm(&self, seed: u64, agent: usize, agents: usize, at_ms: u64) -> u64 {
        match self {
            Demand::Even => PPM / agents.max(1) as u64,
            Demand::Scaled { .. } => {
                let active = self.active_at(at_ms, agents);
                if agent < active {
                    PPM / active as u64
                } else {
                    0
                }
            }
            Demand::Zipf {
                exponent_milli,
                reshuffle_ms,
            } => {
                let epoch = at_ms / (*reshuffle_ms).max(1);
                let rank = ranking(seed, epoch, agents)
                    .iter()
                    .position(|&a| a == agent)
                    .unwrap_or(agents);
                zipf_share_ppm(rank, agents, f64::from(*exponent_milli) / 1_000.0)
            }
            Demand::Load { steps } => {
                let load_pct = steps
                    .iter()
                    .rev()
                    .find(|(from_ms, _)| *from_ms <= at_ms)
                    .map_or(100, |(_, pct)| u64::from(*pct));
                PPM * load_pct / 100 / agents.max(1) as u64
            }
        }
    }

    /// Rejects shapes the run cannot follow.
    pub fn validate(&self, agents: usize) -> Result<(), (&'static str, u64, &'static str)> {
        match self {
            Demand::Even => Ok(()),
            Demand::Scaled { steps } => {
                if steps.len() > SCALE_STEPS_MAX {
                    return Err(("demand.steps", steps.len() as u64, "at most 64 steps"));
                }
                if let Some((_, a)) = steps.iter().find(|(_, a)| *a == 0 || *a > agents) {
                    return Err((
                        "demand.steps.active",
                        *a as u64,
                        "must be from 1 to the number of agents",
                    ));
                }
                if steps.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return Err(("demand.steps.from_ms", 0, "steps must be in time order"));
                }
                Ok(())
            }
            Demand::Zipf {
                exponent_milli,
                reshuffle_ms,
            } => {
                if *exponent_milli > 5_000 {
                    return Err((
                        "demand.exponent_milli",
                        u64::from(*exponent_milli),
                        "must be at most 5000",
                    ));
                }
                if *reshuffle_ms == 0 {
                    return Err(("demand.reshuffle_ms", 0, "must be greater than zero"));
                }
                Ok(())
            }
            Demand::Load { steps } => {
                if steps.len() > SCALE_STEPS_MAX {
                    return Err(("demand.steps", steps.len() as u64, "at most 64 steps"));
                }
                if let Some((_, pct)) = steps.iter().find(|(_, p)| *p > LOAD_PCT_MAX) {
                    return Err((
                        "demand.steps.load_pct",
                        u64::from(*pct),
                        "must be at most 100",
                    ));
                }
                if steps.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return Err(("demand.steps.from_ms", 0, "steps must be in time order"));
                }
                Ok(())
            }
        }
    }
}

/// The agents in rank order (hottest first) during hot-spot epoch `epoch`.
fn ranking(seed: u64, epoch: u64, agents: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..agents).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ HOT_SPOT_SALT ^ epoch.rotate_left(17));
    order.shuffle(&mut rng);
    order
}

/// The share of rank `rank` among `agents` under Zipf's law with exponent `s`, in ppm.
fn zipf_share_ppm(rank: usize, agents: usize, s: f64) -> u64 {
    if rank >= agents {
        return 0;
    }
    let weight = |r: usize| 1.0 / ((r + 1) as f64).powf(s);
    let total: f64 = (0..agents).map(weight).sum();
    (weight(rank) / total * PPM as f64) as u64
}

/// One agent's offers, round by round, with the fraction of a request left over from
/// each round carried to the next.
#[derive(Debug)]
pub struct Offers {
    seed: u64,
    agent: usize,
    agents: usize,
    per_agent: u64,
    /// Parts per million of a request owed from earlier rounds.
    carry_ppm: u64,
}

impl Offers {
    /// Agent `agent` of `agents`, in a run offering `per_agent` requests a round for each
    /// agent.
    pub fn new(seed: u64, agent: usize, agents: usize, per_agent: u64) -> Self {
        Offers {
            seed,
            agent,
            agents,
            per_agent,
            carry_ppm: 0,
        }
    }

    /// Requests to offer in the round at `at_ms`.
    pub fn next(&mut self, demand: &Demand, at_ms: u64) -> u64 {
        if *demand == Demand::Even {
            return self.per_agent;
        }
        let share = demand.share_ppm(self.seed, self.agent, self.agents, at_ms);
        self.carry_ppm += self.per_agent * self.agents as u64 * share;
        let n = self.carry_ppm / PPM;
        self.carry_ppm %= PPM;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(demand: &Demand, agents: usize, rounds: u64) -> Vec<u64> {
        (0..agents)
            .map(|a| {
                let mut o = Offers::new(3, a, agents, 10);
                (0..rounds).map(|r| o.next(demand, r * 10)).sum()
            })
            .collect()
    }

    #[test]
    fn even_demand_gives_every_agent_its_round() {
        assert_eq!(offered(&Demand::Even, 4, 100), vec![1_000; 4]);
    }

    #[test]
    fn scaled_demand_keeps_the_total_as_instances_come_and_go() {
        let d = Demand::Scaled {
            steps: vec![(0, 2), (500, 4)],
        };
        let per = offered(&d, 4, 100);
        // 50 rounds shared by two agents, 50 by four: 40 a round in total throughout.
        assert_eq!(per, vec![1_500, 1_500, 500, 500]);
        assert_eq!(d.active_at(499, 4), 2);
        assert_eq!(d.active_at(500, 4), 4);
    }

    #[test]
    fn zipf_demand_is_skewed_and_moves() {
        let d = Demand::Zipf {
            exponent_milli: 1_100,
            reshuffle_ms: 1_000_000,
        };
        let per = offered(&d, 8, 100);
        let (max, min) = (*per.iter().max().unwrap(), *per.iter().min().unwrap());
        assert!(max > 4 * min, "{per:?}");
        let total: u64 = per.iter().sum();
        assert!((7_990..=8_000).contains(&total), "{total}");
        assert_ne!(ranking(3, 0, 8), ranking(3, 1, 8));
        assert_eq!(ranking(3, 0, 8), ranking(3, 0, 8));
    }

    #[test]
    fn load_steps_shrink_every_agents_round_alike() {
        let d = Demand::Load {
            steps: vec![(300, 10), (600, 100)],
        };
        // 30 full rounds, 30 at a tenth, 40 full: 10 a round for each agent at full load.
        assert_eq!(offered(&d, 4, 100), vec![730; 4]);
        let over = Demand::Load {
            steps: vec![(0, 101)],
        };
        assert_eq!(over.validate(4).unwrap_err().0, "demand.steps.load_pct");
    }

    #[test]
    fn shapes_out_of_range_are_refused_by_name() {
        let bad = Demand::Scaled {
            steps: vec![(0, 5)],
        };
        assert_eq!(bad.validate(4).unwrap_err().0, "demand.steps.active");
        let unordered = Demand::Scaled {
            steps: vec![(10, 1), (10, 2)],
        };
        assert_eq!(unordered.validate(4).unwrap_err().0, "demand.steps.from_ms");
        let flat = Demand::Zipf {
            exponent_milli: 1_000,
            reshuffle_ms: 0,
        };
        assert_eq!(flat.validate(4).unwrap_err().0, "demand.reshuffle_ms");
    }
}
