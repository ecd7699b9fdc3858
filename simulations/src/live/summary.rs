//! The run's figures: live progress per level and the final summary, with every window of
//! admissions checked against `B + r·T`.

use super::config::{LiveConfig, POLICY_ID, REGIONS};
use super::scrape::ClusterFigures;
use super::tally::{Counts, Tally};
use crate::bound::{check_windows, BoundCheck};
use leasehold_common::rate::Rate;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Where `stranded` comes from, stated in the summary.
pub const STRANDED_SOURCE: &str = "leasehold_credit_stranded_total{policy} on /metrics of the \
     global, eu and us allocator clusters (furthest replica of each), summed";

/// One region's cell and its agents.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RegionLevel {
    #[serde(flatten)]
    pub counts: Counts,
    pub agents: BTreeMap<String, Counts>,
}

/// Offered, admitted and rejected requests per level, and each allocator cluster's ledger.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Levels {
    pub global: Counts,
    pub regions: BTreeMap<String, RegionLevel>,
    /// Ledger figures per allocator cluster; filled in at the end of the run.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocators: BTreeMap<String, ClusterFigures>,
}

/// Progress so far.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    pub elapsed_ms: u64,
    /// `tenants × (B + r·T)` for the time so far.
    pub bound: u64,
    pub levels: Levels,
}

/// One policy's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySummary {
    pub keys: u64,
    pub rate_per_sec: u64,
    pub burst: u64,
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
    /// Sum over the keys of `B + r·T`, T the time traffic was offered.
    pub bound: u64,
    /// Windows (pairs of buckets, per key) whose admissions exceeded `B + r·T`.
    pub violations: u64,
    pub windows_checked: u64,
    pub worst_excess: u64,
    /// Admitted as a share of the bound.
    pub utilisation: f64,
    /// Credit written off at expiry in the allocator clusters (see `stranded_source`).
    pub stranded: u64,
}

/// The demo's final report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub duration_ms: u64,
    pub bucket_ms: u64,
    pub policies: BTreeMap<String, PolicySummary>,
    pub levels: Levels,
    pub stranded_source: &'static str,
}

impl Summary {
    /// Windows over the bound, all policies.
    pub fn violations(&self) -> u64 {
        self.policies.values().map(|p| p.violations).sum()
    }
}

/// `tenants × (B + r·T)`.
pub fn bound(cfg: &LiveConfig, rate: Rate, elapsed_ns: u64) -> u64 {
    cfg.tenants as u64 * (cfg.burst + rate.units_in(elapsed_ns))
}

/// Counts per level, with agent names.
pub fn levels(cfg: &LiveConfig, tally: &Tally) -> Levels {
    let mut regions = BTreeMap::new();
    for (r, region) in REGIONS.iter().enumerate() {
        let agents = (0..cfg.agents_per_region)
            .map(|a| (LiveConfig::agent_name(region, a), tally.agent(r, a)))
            .collect();
        let counts = tally.region(r);
        regions.insert(region.to_string(), RegionLevel { counts, agents });
    }
    Levels {
        global: tally.total(),
        regions,
        allocators: BTreeMap::new(),
    }
}

pub fn snapshot(cfg: &LiveConfig, rate: Rate, tally: &Tally, elapsed_ns: u64) -> Snapshot {
    Snapshot {
        elapsed_ms: elapsed_ns / 1_000_000,
        bound: bound(cfg, rate, elapsed_ns),
        levels: levels(cfg, tally),
    }
}

/// Checks every window of every key. Admissions are bucketed, so those of buckets `i..=j`
/// happened within `(j − i + 1)` buckets of time: the checker's `B + r·(j − i)·step` gets
/// one bucket's refill added to the burst to stay exact.
pub fn check(cfg: &LiveConfig, rate: Rate, tally: &Tally) -> BoundCheck {
    let step = tally.bucket_ns();
    let burst = cfg.burst + rate.units_in(step);
    let mut all = BoundCheck::default();
    for t in 0..tally.tenants() {
        let c = check_windows(tally.series(t), step, rate, burst);
        all.windows += c.windows;
        all.violations += c.violations;
        if c.worst_excess > all.worst_excess {
            all.worst_excess = c.worst_excess;
            all.worst_start = c.worst_start;
        }
    }
    all
}

/// The final summary; `allocators` are the clusters' ledger figures for the policy.
pub fn summarise(
    cfg: &LiveConfig,
    rate: Rate,
    tally: &Tally,
    elapsed_ns: u64,
    allocators: BTreeMap<String, ClusterFigures>,
) -> Summary {
    let c = check(cfg, rate, tally);
    let total = tally.total();
    let bound = bound(cfg, rate, elapsed_ns);
    let stranded = allocators.values().map(|f| f.stranded).sum();
    let policy = PolicySummary {
        keys: cfg.tenants as u64,
        rate_per_sec: cfg.rate_per_sec,
        burst: cfg.burst,
        offered: total.offered,
        admitted: total.admitted,
        rejected: total.rejected,
        bound,
        violations: c.violations,
        windows_checked: c.windows,
        worst_excess: c.worst_excess,
        utilisation: total.admitted as f64 / bound.max(1) as f64,
        stranded,
    };
    let mut levels = levels(cfg, tally);
    levels.allocators = allocators;
    Summary {
        seed: cfg.seed,
        duration_ms: elapsed_ns / 1_000_000,
        bucket_ms: tally.bucket_ns() / 1_000_000,
        policies: BTreeMap::from([(POLICY_ID.to_string(), policy)]),
        levels,
        stranded_source: STRANDED_SOURCE,
    }
}

fn row(out: &mut String, indent: usize, name: &str, c: Counts) {
    let _ = writeln!(
        out,
        "  {:indent$}{:<width$} {:>9} {:>9} {:>9}",
        "",
        name,
        c.offered,
        c.admitted,
        c.rejected,
        width = 16 - indent
    );
}

/// A progress block: one row per level, and the bound so far.
pub fn format_progress(s: &Snapshot) -> String {
    let mut out = String::new();
    let used = 100.0 * s.levels.global.admitted as f64 / s.bound.max(1) as f64;
    let _ = writeln!(
        out,
        "[{:>4}.{}s] bound B + r·T = {}  admitted {} ({used:.1}% of the bound)",
        s.elapsed_ms / 1_000,
        s.elapsed_ms % 1_000 / 100,
        s.bound,
        s.levels.global.admitted
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>9} {:>9} {:>9}",
        "level", "offered", "admitted", "rejected"
    );
    row(&mut out, 0, "global", s.levels.global);
    for (name, region) in &s.levels.regions {
        row(&mut out, 2, name, region.counts);
        for (agent, c) in &region.agents {
            row(&mut out, 4, agent, *c);
        }
    }
    out
}

/// The summary for people.
pub fn format_summary(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nsummary after {} ms of traffic (seed {})",
        s.duration_ms, s.seed
    );
    for (id, p) in &s.policies {
        let _ = writeln!(
            out,
            "policy {id}: {} keys × (burst {} + {}/s × T)",
            p.keys, p.burst, p.rate_per_sec
        );
        let _ = writeln!(out, "  offered   {:>10}", p.offered);
        let _ = writeln!(
            out,
            "  admitted  {:>10}   bound {}   ({:.1}% of the bound)",
            p.admitted,
            p.bound,
            100.0 * p.utilisation
        );
        let _ = writeln!(out, "  rejected  {:>10}", p.rejected);
        let _ = writeln!(
            out,
            "  windows   {:>10} checked ({} ms buckets), {} over the bound (worst excess {})",
            p.windows_checked, s.bucket_ms, p.violations, p.worst_excess
        );
        let _ = writeln!(
            out,
            "  stranded  {:>10}   (credit written off at expiry)",
            p.stranded
        );
    }
    for (name, r) in &s.levels.regions {
        let _ = writeln!(
            out,
            "  region {name}: offered {}, admitted {}, rejected {}",
            r.counts.offered, r.counts.admitted, r.counts.rejected
        );
    }
    for (name, f) in &s.levels.allocators {
        let _ = writeln!(
            out,
            "  allocator {name}: granted {}, used {}, stranded {}, outstanding {}",
            f.granted, f.used, f.stranded, f.outstanding
        );
    }
    let _ = writeln!(out, "  stranded from: {}", s.stranded_source);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (LiveConfig, Rate, Tally) {
        let cfg = LiveConfig {
            tenants: 2,
            agents_per_region: 1,
            rate_per_sec: 100,
            burst: 10,
            ..LiveConfig::default()
        };
        let rate = cfg.rate().unwrap();
        let tally = Tally::new(REGIONS.len(), 1, 2, 1_000_000_000);
        (cfg, rate, tally)
    }

    #[test]
    fn a_window_over_burst_plus_refill_is_a_violation() {
        let (cfg, rate, mut tally) = setup();
        // One 10 ms bucket may hold the burst and that bucket's refill (1 unit), per key.
        for _ in 0..11 {
            tally.record(0, 0, 0, 0, true);
            tally.record(1, 0, 1, 0, true);
        }
        assert_eq!(check(&cfg, rate, &tally).violations, 0);
        tally.record(1, 0, 1, 5_000_000, true);
        let c = check(&cfg, rate, &tally);
        assert!(c.violations > 0 && c.worst_excess == 1, "{c:?}");
        let s = summarise(&cfg, rate, &tally, 1_000_000_000, BTreeMap::new());
        let p = &s.policies[POLICY_ID];
        assert_eq!(
            (p.admitted, p.bound, p.violations),
            (23, 2 * 110, c.violations)
        );
        assert_eq!(s.violations(), c.violations);
    }

    #[test]
    fn stranded_sums_the_clusters_and_levels_name_the_agents() {
        let (cfg, rate, mut tally) = setup();
        tally.record(1, 0, 0, 0, false);
        let figures = |stranded| ClusterFigures {
            stranded,
            ..ClusterFigures::default()
        };
        let clusters = BTreeMap::from([("global".into(), figures(5)), ("eu".into(), figures(2))]);
        let s = summarise(&cfg, rate, &tally, 1_000_000_000, clusters);
        assert_eq!(s.policies[POLICY_ID].stranded, 7);
        let us = &s.levels.regions["us"];
        assert_eq!(us.agents["us-agent-1"].rejected, 1);
        assert!(format_progress(&snapshot(&cfg, rate, &tally, 0)).contains("us-agent-1"));
    }
}
