//! Attacker key spraying on the production code: behind one agent an attacker presents a
//! tenant never seen before on every request, thousands a second, while every agent serves
//! the established tenant beyond its rate. The agent's key table and the allocator's ledger
//! stay within their caps (the table's overflow goes to the policy's overflow key, the
//! ledger refuses keys past its cap), and the tenant keeps its budget.

use super::{promises, report, run, run_facts, standard_series};
use crate::error::SimError;
use crate::net::{NetConfig, Spray};
use crate::promises::{Promise, PromiseLog};
use crate::scenario::{LineStyle, RunOptions, ScenarioReport};

pub const NAME: &str = "net-key-spray";

/// The agent engine's key-table cap, and the allocator ledger's key cap.
const AGENT_KEYS_MAX: usize = 64;
const GRANTOR_KEYS_MAX: usize = 128;
/// A key unused this long may leave the agent's table, making room for another.
const KEY_IDLE_MS: u64 = 1_000;

fn config(opts: &RunOptions) -> NetConfig {
    let s = opts.scale;
    let duration_ms = s.pick(20_000, 10_000);
    NetConfig {
        agents: 4,
        duration_ms,
        faults: 0,
        spray: Some(Spray {
            agent: 3,
            keys_per_round: 20,
            from_ms: 2_000,
            until_ms: duration_ms - 2_000,
        }),
        agent_keys_max: Some(AGENT_KEYS_MAX),
        agent_key_idle_ms: Some(KEY_IDLE_MS),
        grantor_keys_max: Some(GRANTOR_KEYS_MAX),
        ..NetConfig::quick()
    }
}

pub fn scenario(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let cfg = config(opts);
    let r = run(opts, &cfg)?;
    let mut log: PromiseLog = promises(&r, "spray");
    let sp = r.spray;
    if sp.engine_keys_peak > sp.engine_keys_max {
        log.record(Promise::BoundedState, 0, || {
            format!(
                "the spraying agent's engine held {} keys (max {})",
                sp.engine_keys_peak, sp.engine_keys_max
            )
        });
    }
    let spray = cfg.spray.expect("configured");
    let chart = super::per_second_chart("Key spraying: the tenant's admissions (production code)")
        .line("admitted_1s", "tenant acme (charged)", LineStyle::Solid)
        .line("bound_1s", "B + r·1s", LineStyle::Dashed);
    let about = format!(
        "The production allocator (one node, its ledger capped at {GRANTOR_KEYS_MAX} keys) and \
         four production agents (each engine's key table capped at {AGENT_KEYS_MAX} keys), \
         r = {} units/s, B = {} per tenant. Every agent offers tenant `acme` {} requests/s in \
         all, above its rate. From {} ms to {} ms an attacker behind agent {} presents {} \
         tenants never seen before every 10 ms, each on one request. The engine keeps at most \
         its cap of keys (a key unused for {KEY_IDLE_MS} ms may be dropped) and charges the rest to the policy's \
         overflow key; each key it holds asks the allocator for a lease, and the ledger \
         refuses keys past its cap. `acme`'s admissions are checked against B + r·T over \
         every window.",
        cfg.rate_per_s,
        cfg.burst,
        cfg.offered_per_s(),
        spray.from_ms,
        spray.until_ms,
        spray.agent,
        spray.keys_per_round,
    );
    let mut out = report(
        (NAME, opts),
        "Attacker key spraying (production code)",
        &about,
        log,
        (standard_series(&r, &cfg), chart),
    );
    run_facts(&mut out, "", &r, &cfg);
    out.fact("sprayed requests (fresh tenants)", sp.offered);
    out.fact("sprayed requests admitted", sp.admitted);
    out.fact("agent key table: most keys held", sp.engine_keys_peak);
    out.fact("agent key table: cap", sp.engine_keys_max);
    out.fact("sent to the overflow key (table full)", sp.table_full);
    if let Some(g) = &r.grantor {
        out.fact("allocator ledger: most keys held", r.grantor_keys_peak);
        out.fact("allocator ledger: keys at the end", g.keys);
        out.fact("allocator ledger: key cap", g.keys_max);
    }
    let bound = cfg.burst + cfg.rate().units_in(cfg.duration_ms * 1_000_000);
    out.fact(
        "acme: admitted of its B + r·T (%)",
        r.admissions.len() as u64 * 100 / bound.max(1),
    );
    Ok(out)
}
