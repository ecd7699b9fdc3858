//! Named scenarios over the in-process hierarchy, and the fuzz mode.
//!
//! Each scenario builds a hierarchy (or, for key spraying, a bare ledger), injects its
//! faults, checks the promises as it runs and returns a [`ScenarioReport`]: the promise
//! log, headline figures and a time series with the chart to draw from it. Everything
//! derives from the seed, so a run replays bit for bit.

mod autoscaling;
mod clock_rollback;
mod crash;
pub mod fuzz;
mod key_spray;
mod leader_loss;
mod lease_size;
pub mod networked;
mod partition;
mod report;
mod rollout;
mod seconds;
mod zipf;

pub use report::{Chart, ChartLine, Fact, LineStyle, ScenarioReport, Series};

use crate::error::SimError;

/// How big a run is: the full size for figures, or a quick one for tests.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scale {
    Full,
    Quick,
}

impl Scale {
    /// `full` for a full run, `quick` for a quick one.
    pub fn pick<T>(self, full: T, quick: T) -> T {
        match self {
            Scale::Full => full,
            Scale::Quick => quick,
        }
    }
}

/// What a scenario is run with.
#[derive(Copy, Clone, Debug)]
pub struct RunOptions {
    pub seed: u64,
    pub scale: Scale,
}

/// A named scenario.
pub struct Scenario {
    pub name: &'static str,
    /// One line on what it shows.
    pub about: &'static str,
    pub run: fn(&RunOptions) -> Result<ScenarioReport, SimError>,
}

/// Every scenario, in the order `all` runs them.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "autoscaling",
        about: "instances scale from 4 to 12: process-local buckets admit ~N×R, leased credit stays within B + R·T",
        run: autoscaling::run,
    },
    Scenario {
        name: "partition",
        about: "agents and a region cut off from their grantor under each failure behaviour",
        run: partition::run,
    },
    Scenario {
        name: "crash",
        about: "enforcers crash holding unused credit and just after spending it",
        run: crash::run,
    },
    Scenario {
        name: "leader-loss",
        about: "the root loses its leader mid-grant, with the grant lost or kept; holders retry by request id",
        run: leader_loss::run,
    },
    Scenario {
        name: "clock-rollback",
        about: "clocks step back at agents and at a region: no credit minted, no lease extended",
        run: clock_rollback::run,
    },
    Scenario {
        name: "rollout",
        about: "a new policy version halves the rate under traffic; the new bound holds after the transition",
        run: rollout::run,
    },
    Scenario {
        name: "key-spray",
        about: "an attacker sprays distinct keys: state stays capped, legitimate tenants keep their share",
        run: key_spray::run,
    },
    Scenario {
        name: "zipf",
        about: "Zipf demand over 120 agents with moving hot spots: utilisation against the bound",
        run: zipf::run,
    },
    Scenario {
        name: "lease-size",
        about: "grantor request rate and stranded credit against lease size, beside the capacity model",
        run: lease_size::run,
    },
    Scenario {
        name: networked::partition::NAME,
        about: "production code on the simulated network: agents cut off under each failure behaviour",
        run: networked::partition::scenario,
    },
    Scenario {
        name: networked::autoscaling::NAME,
        about: "production code: instances scale from 4 to 12; local buckets admit ~N×R, leased agents stay within B + R·T",
        run: networked::autoscaling::scenario,
    },
    Scenario {
        name: networked::zipf::NAME,
        about: "production code: Zipf demand over 120 agents with moving hot spots; utilisation, and credit following the hot spots",
        run: networked::zipf::scenario,
    },
    Scenario {
        name: networked::lease_size::NAME,
        about: "production code: grantor calls and stranded credit against lease size, with agent crashes, beside the §9 model",
        run: networked::lease_size::scenario,
    },
    Scenario {
        name: networked::rollout::NAME,
        about: "production code: a new policy version at a fifth of the rate applied under traffic; each version's bound holds",
        run: networked::rollout::scenario,
    },
    Scenario {
        name: networked::key_spray::NAME,
        about: "production code on the simulated network: an attacker sprays fresh tenants; key tables and the ledger stay capped",
        run: networked::key_spray::scenario,
    },
    Scenario {
        name: networked::crash::NAME,
        about: "production agents crash holding unspent credit and just after spending it, with and without state files",
        run: networked::crash::scenario,
    },
    Scenario {
        name: networked::leader_loss::NAME,
        about: "a 3-node Raft allocator loses its leader under traffic, with agent calls on the wire",
        run: networked::leader_loss::scenario,
    },
    Scenario {
        name: networked::clock_rollback::NAME,
        about: "production agents' clocks step back, one of them while cut off holding credit",
        run: networked::clock_rollback::scenario,
    },
    Scenario {
        name: networked::windows::NAME,
        about: "production code: fixed window, sliding window and a calendar day across a DST change, through a partition and leader crashes",
        run: networked::windows::scenario,
    },
    Scenario {
        name: "fuzz",
        about: "one seed of random faults: crashes, partitions, clock steps, leader loss, demand shifts",
        run: fuzz::run,
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Result<&'static Scenario, SimError> {
    ALL.iter()
        .find(|s| s.name == name)
        .ok_or_else(|| SimError::UnknownScenario(name.to_string()))
}
