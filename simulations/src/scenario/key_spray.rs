//! An attacker sprays distinct keys at an enforcer. The enforcer's key table is capped:
//! identities it cannot track, and all unauthenticated traffic, are aggregated into one
//! overflow key with its own small budget. The root ledger's keys and leases stay within
//! their caps, idle keys are dropped, and the established tenants keep their share.

mod gate;
mod holder;
mod world;

use super::{Chart, LineStyle, RunOptions, ScenarioReport, Series};
use crate::bound::check_windows;
use crate::error::SimError;
use crate::promises::{Promise, PromiseLog};
use gate::Gate;
use holder::Holder;
use leasehold_common::ledger::{
    Command, LeaseParams, Ledger, LedgerConfig, LedgerLimits, PolicyParams,
};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use rand::SeedableRng;
use std::collections::BTreeMap;
use world::World;

const TENANT_POLICY: &str = "tenant";
const OVERFLOW_POLICY: &str = "overflow";
const OVERFLOW_KEY: &str = "overflow:all";
const STEP_MS: u64 = 10;
const TENANTS: usize = 4;
/// Tenant policy: per key.
const TENANT_RATE: u64 = 100;
const TENANT_BURST: u64 = 200;
const OVERFLOW_RATE: u64 = 50;
const OVERFLOW_BURST: u64 = 100;
/// The enforcer's key table.
const GATE_KEYS_MAX: usize = 64;
const GATE_IDLE_MS: u64 = 1_000;
const LEDGER_KEYS_MAX: usize = 128;
const LEDGER_LEASES_MAX: usize = 256;
/// Unauthenticated units the attacker sends per step, at most.
const UNAUTHENTICATED_PER_STEP_MAX: u64 = 40;
/// Every key is held by the one enforcer.
const HOLDER: &str = "enforcer";

fn policy(id: &str, rate: u64, burst: u64) -> PolicyParams {
    PolicyParams {
        policy_id: id.into(),
        version: 1,
        rate: Rate::per_second(rate).expect("positive"),
        burst,
        lease: LeaseParams {
            ttl_ms: 2_000,
            min_credit: 1,
            max_credit: burst,
            reserve_ppm: 0,
            reserve_priority_min: 8,
            refresh_horizon_ms: 500,
        },
        weights: Default::default(),
        window: None,
        owner: Default::default(),
        exact: false,
    }
}

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let duration_s = opts.scale.pick(30, 8);
    let mut w = World::new(opts.seed, opts.scale.pick(40, 20))?;
    let mut series = Series::new(&[
        "t_s",
        "ledger_keys",
        "ledger_leases",
        "gate_keys",
        "keys_cap",
        "tenants_admitted",
        "tenants_bound_1s",
        "overflow_admitted",
        "sprayed",
    ]);
    let per_s = 1_000 / STEP_MS;
    let mut row = vec![0u64; series.columns.len()];
    for step in 0..duration_s * per_s {
        let f = w.step(step * STEP_MS);
        row[1] = row[1].max(w.ledger.accounts().count() as u64);
        row[2] = row[2].max(w.ledger.leases().count() as u64);
        row[3] = row[3].max(w.gate.len() as u64);
        row[5] += f.tenants;
        row[7] += f.overflow;
        row[8] += f.sprayed;
        if (step + 1) % per_s == 0 {
            row[0] = step / per_s;
            row[4] = LEDGER_KEYS_MAX as u64;
            row[6] = TENANTS as u64 * (TENANT_BURST + TENANT_RATE);
            let width = row.len();
            series.push(std::mem::replace(&mut row, vec![0; width]));
        }
    }
    w.check_bounds();
    let tenant_admitted: u64 = w.tenants.iter().map(Holder::admitted).sum();
    let tenant_entitled = TENANTS as u64 * TENANT_RATE * duration_s;
    let mut report = ScenarioReport {
        scenario: "key-spray".into(),
        seed: opts.seed,
        title: "Attacker key spraying".into(),
        about: "Four established tenants each offer 150% of their 100 units/s. An attacker \
                presents up to 40 new identities every 10 ms step, and unauthenticated traffic, \
                both drawn from the seed. The enforcer \
                tracks at most 64 identities on their own keys (idle ones leave after a second); \
                the rest, and all unauthenticated traffic, are charged to one overflow key with \
                its own 50 units/s. The root ledger's keys and leases stay under their caps, \
                the overflow key stays within its own bound, and the tenants keep their share."
            .into(),
        checked: Promise::MODEL.to_vec(),
        promises: w.log,
        facts: Vec::new(),
        series,
        chart: Chart::new(
            "State and tenant admissions under a key spray",
            "time (s)",
            "keys, units per second",
        )
        .line("ledger_keys", "keys in the root ledger", LineStyle::Solid)
        .line(
            "gate_keys",
            "identities tracked by the enforcer",
            LineStyle::Solid,
        )
        .line("keys_cap", "ledger key cap", LineStyle::Dashed)
        .line(
            "tenants_admitted",
            "tenants admitted per second",
            LineStyle::Solid,
        )
        .line(
            "overflow_admitted",
            "overflow admitted per second",
            LineStyle::Solid,
        ),
    };
    report.fact("identities sprayed", w.identities);
    report.fact("aggregated into the overflow key", w.gate.aggregated);
    report.fact("sprayed requests refused by the ledger", w.refused);
    report.fact("tenants admitted", tenant_admitted);
    report.fact("tenants' sustained entitlement (R·T)", tenant_entitled);
    report.fact(
        "tenants' share of their entitlement (%)",
        tenant_admitted * 100 / tenant_entitled,
    );
    report.fact("overflow admitted", w.overflow.admitted());
    Ok(report)
}
