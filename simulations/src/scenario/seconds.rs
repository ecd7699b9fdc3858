//! Per-step records folded into one row per simulated second, for series and charts.

use crate::hierarchy::{Hierarchy, StepRecord};

/// One simulated second of a run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Second {
    pub t_s: u64,
    pub offered: u64,
    pub admitted: u64,
    pub fail_open: u64,
    pub restricted: u64,
    pub rejected: u64,
    pub root_requests: u64,
    pub region_requests: u64,
    /// Levels at the end of the second.
    pub root_outstanding: u64,
    pub stranded: u64,
    pub active_agents: u64,
    /// Peaks within the second.
    pub keys: u64,
    pub leases: u64,
    /// The policy's `B + r·1s` in force at the start of the second.
    pub bound_1s: u64,
}

/// Folds a run's records into seconds.
pub fn seconds(sim: &Hierarchy) -> Vec<Second> {
    let per_s = (1_000 / sim.config().step_ms) as usize;
    let epochs = sim.epochs();
    sim.records()
        .chunks(per_s)
        .enumerate()
        .map(|(i, chunk)| {
            let step = i * per_s;
            let e = epochs
                .iter()
                .rev()
                .find(|e| e.from_step <= step)
                .expect("the first version starts at step 0");
            fold(i as u64, chunk, e.burst + e.rate.units_in(1_000_000_000))
        })
        .collect()
}

fn fold(t_s: u64, chunk: &[StepRecord], bound_1s: u64) -> Second {
    let mut s = Second {
        t_s,
        bound_1s,
        ..Second::default()
    };
    for r in chunk {
        s.offered += r.totals.offered;
        s.admitted += r.totals.admitted;
        s.fail_open += r.totals.fail_open;
        s.restricted += r.totals.restricted;
        s.rejected += r.totals.rejected;
        s.root_requests += r.root_requests;
        s.region_requests += r.region_requests;
        s.keys = s.keys.max(r.keys);
        s.leases = s.leases.max(r.leases);
    }
    if let Some(last) = chunk.last() {
        s.root_outstanding = last.root_outstanding;
        s.stranded = last.stranded;
        s.active_agents = last.active_agents;
    }
    s
}

/// The columns most scenarios plot: traffic, the bound, stranded credit and grantor load.
pub fn standard_series(sim: &Hierarchy) -> super::Series {
    let mut series = super::Series::new(&[
        "t_s",
        "offered",
        "admitted",
        "bound_1s",
        "stranded",
        "root_requests",
        "region_requests",
    ]);
    for s in seconds(sim) {
        series.push(vec![
            s.t_s,
            s.offered,
            s.admitted,
            s.bound_1s,
            s.stranded,
            s.root_requests,
            s.region_requests,
        ]);
    }
    series
}

/// Offered and admitted units per second against the one-second bound labelled `bound`.
pub fn offered_admitted_chart(title: &str, bound: &str) -> super::Chart {
    super::Chart::new(title, "time (s)", "units per second")
        .line("offered", "offered", super::LineStyle::Solid)
        .line("admitted", "admitted", super::LineStyle::Solid)
        .line("bound_1s", bound, super::LineStyle::Dashed)
}
