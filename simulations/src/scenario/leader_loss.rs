//! The root loses its leader while applying a region's request. The new leader restores
//! the last applied state: without the command (the grant is lost) or with it (the grant
//! is kept but its answer never left). The region resends the same request id; a kept
//! grant is answered from the ledger's memory, so the credit is granted once either way.

use super::{Chart, LineStyle, RunOptions, ScenarioReport};
use crate::error::SimError;
use crate::hierarchy::{Fault, Hierarchy, HierarchyConfig, LeaderLoss};

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let s = opts.scale;
    let cfg = HierarchyConfig {
        seed: opts.seed,
        duration_s: s.pick(40, 12),
        crash_agent_at_s: None,
        ..HierarchyConfig::default()
    };
    let mut sim = Hierarchy::new(cfg)?;
    let every_ms = s.pick(2_000, 1_000);
    let losses = s.pick(18u64, 10);
    for i in 0..losses {
        let loss = if i % 2 == 0 {
            LeaderLoss::GrantLost
        } else {
            LeaderLoss::GrantKept
        };
        sim.schedule(1_000 + i * every_ms, Fault::LeaderLoss(loss))?;
    }
    sim.run();
    let v = sim.levels();
    let mut report = ScenarioReport::standard(
        &sim,
        ("leader-loss", opts.seed),
        "Allocator leader loss mid-grant",
        "Two regions lease from the root; every couple of seconds the root's leader is \
                lost while it applies a region's acquire or report, alternately before the \
                command was committed (the grant is lost) and after (the grant is kept, its \
                answer lost). The region gets no answer and resends the same request id to the \
                new leader. The checker confirms that no region ever believes it holds more of a \
                root lease than the root granted, that every ledger conserves its units, and \
                that the bound holds.",
        Chart::new(
            "Admissions and root requests through leader losses",
            "time (s)",
            "per second",
        )
        .line("admitted", "admitted units", LineStyle::Solid)
        .line("root_requests", "root requests", LineStyle::Solid)
        .line("bound_1s", "B + R·1s", LineStyle::Dashed),
    );
    report.fact("leader losses", sim.leader_losses());
    report.fact(
        "requests resent after no answer",
        sim.unanswered_region_requests(),
    );
    report.fact("root epoch at the end", sim.root_ledger().epoch());
    report.fact("admitted", v.agents.admitted);
    report.fact("bound over the run (B + R·T)", sim.bound());
    Ok(report)
}
