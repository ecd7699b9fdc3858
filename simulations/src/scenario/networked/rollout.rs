//! A policy rollout under traffic on the production code: mid-run an admin host applies a
//! new version of the policy, at a fifth of the rate and burst, through the allocator's
//! admin service; the agents learn it from their watch streams and move onto replacement
//! leases. Every window is held to the bound of its version ([`crate::net::RolloutCheck`]).

use super::{count_per_step, promises, report, run, run_facts, trailing_second, STEP_MS};
use crate::error::SimError;
use crate::net::rollout::{Phases, RolloutLog, RolloutReport};
use crate::net::{NetConfig, RolloutSpec};
use crate::scenario::{LineStyle, RunOptions, ScenarioReport, Series};

pub const NAME: &str = "net-rollout";

fn config(opts: &RunOptions) -> NetConfig {
    let s = opts.scale;
    let base = NetConfig::quick();
    NetConfig {
        agents: 4,
        duration_ms: s.pick(30_000, 10_000),
        faults: 0,
        rollout: Some(RolloutSpec {
            at_ms: s.pick(10_000, 4_000),
            rate_per_s: base.rate_per_s / 5,
            burst: base.burst / 5,
        }),
        ..base
    }
}

/// `B + r·1s` under each phase's bound: the old version's before the rollout is sent, both
/// bursts and the larger rate until the transition ends, the new version's after.
fn bound_in_force(p: &Phases, at_ns: u64) -> u64 {
    let second_ns = 1_000_000_000;
    let one = |(rate, burst): (leasehold_common::rate::Rate, u64)| burst + rate.units_in(second_ns);
    if at_ns < p.sent_ns {
        one(p.old)
    } else if at_ns < p.applied_ns.saturating_add(p.transition_ns) {
        p.old.1 + p.new.1 + p.old.0.units_in(second_ns).max(p.new.0.units_in(second_ns))
    } else {
        one(p.new)
    }
}

/// Agents whose engine enforces `version` at `at_ns`.
fn agents_on(log: &RolloutLog, version: u64, at_ns: u64) -> u64 {
    let on = |changes: &Vec<(u64, u64)>| {
        changes
            .iter()
            .rev()
            .find(|(t, _)| *t <= at_ns)
            .is_some_and(|(_, v)| *v == version)
    };
    log.agent_versions.iter().filter(|c| on(c)).count() as u64
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let cfg = config(opts);
    let r = run(opts, &cfg)?;
    let log = promises(&r, "rollout");
    let ro = r
        .rollout
        .as_ref()
        .ok_or_else(|| SimError::config("rollout", "none", "the run did not report its rollout"))?;
    let p = &ro.phases;
    let admitted = trailing_second(&count_per_step(&r.admissions, cfg.duration_ms));
    let mut series = Series::new(&[
        "t_ms",
        "admitted_1s",
        "old_bound_1s",
        "new_bound_1s",
        "bound_in_force_1s",
        "agents_on_new",
    ]);
    let second_ns = 1_000_000_000;
    let old_1s = p.old.1 + p.old.0.units_in(second_ns);
    let new_1s = p.new.1 + p.new.0.units_in(second_ns);
    for (i, a) in admitted.iter().enumerate() {
        let t_ms = (i as u64 + 1) * STEP_MS;
        let at_ns = t_ms * 1_000_000;
        series.push(vec![
            t_ms,
            *a,
            old_1s,
            new_1s,
            bound_in_force(p, at_ns),
            agents_on(&ro.log, ro.log.version, at_ns),
        ]);
    }
    let chart = super::per_second_chart("A policy rollout under traffic (production code)")
        .line("admitted_1s", "admitted", LineStyle::Solid)
        .line(
            "old_bound_1s",
            "B₁ + r₁·1s (old version)",
            LineStyle::Dashed,
        )
        .line(
            "new_bound_1s",
            "B₂ + r₂·1s (new version)",
            LineStyle::Dashed,
        )
        .line("bound_in_force_1s", "bound in force", LineStyle::Dashed)
        .line(
            "agents_on_new",
            "agents on the new version",
            LineStyle::Solid,
        );
    let mut out = report(
        (NAME, opts),
        "A policy rollout under traffic (production code)",
        &about(&cfg),
        log,
        (series, chart),
    );
    run_facts(&mut out, "", &r, &cfg);
    facts(&mut out, &cfg, ro, &r.admissions);
    Ok(out)
}

fn about(cfg: &NetConfig) -> String {
    let spec = cfg.rollout.unwrap_or(RolloutSpec {
        at_ms: 0,
        rate_per_s: 0,
        burst: 0,
    });
    format!(
        "The production allocator (one node) and {} production agents on the simulated \
         network offer {} units/s under a policy of r₁ = {} units/s, B₁ = {}. At {} ms an \
         admin host applies a new version, r₂ = {} units/s and B₂ = {}, through the \
         allocator's admin service, as `leasectl policy apply` does; the agents learn it from \
         their watch streams and move onto replacement leases. Windows before the rollout is \
         sent are held to B₁ + r₁·T; windows starting within a lease lifetime plus the \
         write-off grace after it was applied, to B₁ + B₂ + max(r₁, r₂)·T (credit of the old \
         version may still be spent); windows after that, to B₂ + r₂·T. Windows spanning the \
         apply call itself are not checked.",
        cfg.agents,
        cfg.offered_per_s(),
        cfg.rate_per_s,
        cfg.burst,
        spec.at_ms,
        spec.rate_per_s,
        spec.burst,
    )
}

fn facts(
    out: &mut ScenarioReport,
    cfg: &NetConfig,
    ro: &RolloutReport,
    admissions: &[crate::net::Admission],
) {
    let ms = |ns: Option<u64>| ns.map_or("never".to_string(), |n| (n / 1_000_000).to_string());
    out.fact("new version", ro.log.version);
    out.fact("sent at (ms)", ms(ro.log.sent_ns));
    out.fact("applied at (ms)", ms(ro.log.applied_ns));
    out.fact("apply attempts", ro.log.attempts);
    out.fact(
        "transition ends at (ms)",
        ro.check.transition_end_ns / 1_000_000,
    );
    out.fact(
        "every agent on the new version at (ms)",
        ms(ro.all_on_new_ns),
    );
    let on_new = ro
        .final_versions
        .iter()
        .filter(|&&v| v == ro.log.version)
        .count();
    out.fact("agents on the new version at the end", on_new);
    out.fact("agents", cfg.agents);
    out.fact("agents out of reach", ro.out_of_reach.len());
    let old_leases: usize = ro
        .books_versions
        .iter()
        .filter(|(&v, _)| v != ro.log.version)
        .map(|(_, n)| n)
        .sum();
    out.fact("old-version leases on the books at the end", old_leases);
    for (name, c) in [
        ("before", &ro.check.before),
        ("transition", &ro.check.transition),
        ("after", &ro.check.after),
    ] {
        out.fact(&format!("{name}: windows checked"), c.windows);
        out.fact(&format!("{name}: windows over the bound"), c.violations);
    }
    let rate = |from_ns: u64, until_ns: u64| {
        let n = admissions
            .iter()
            .filter(|a| (from_ns..until_ns).contains(&a.at_ns))
            .count() as u64;
        n * 1_000_000_000 / until_ns.saturating_sub(from_ns).max(1)
    };
    let sent_ns = ro.log.sent_ns.unwrap_or(0);
    let end_ns = cfg.duration_ms * 1_000_000;
    out.fact(
        "admitted/s before the rollout (from 1 s)",
        rate(1_000_000_000, sent_ns),
    );
    out.fact(
        "admitted/s after the transition",
        rate(ro.check.transition_end_ns.min(end_ns), end_ns),
    );
}
