//! An attacker sprays distinct keys at an enforcer. The enforcer's key table is capped:
//! identities it cannot track, and all unauthenticated traffic, are aggregated into one
//! overflow key with its own small budget. The root ledger's keys and leases stay within
//! their caps, idle keys are dropped, and the established tenants keep their share.

mod holder;

use super::{Chart, LineStyle, RunOptions, ScenarioReport, Series};
use crate::bound::check_windows;
use crate::error::SimError;
use crate::promises::{Promise, PromiseLog};
use holder::Holder;
use leasehold_common::ledger::Command;
use leasehold_common::ledger::{LeaseParams, Ledger, LedgerConfig, LedgerLimits, PolicyParams};
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use std::collections::BTreeMap;

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
    }
}

/// The enforcer's bounded table of identities it tracks on their own keys.
struct Gate {
    last_seen_ms: BTreeMap<String, u64>,
    aggregated: u64,
}

impl Gate {
    /// The key `identity`'s traffic is charged to: its own while the table has room (or it
    /// is already there), the overflow key otherwise.
    fn route(&mut self, identity: &str, now_ms: u64) -> String {
        if let Some(seen) = self.last_seen_ms.get_mut(identity) {
            *seen = now_ms;
            return format!("{TENANT_POLICY}:{identity}");
        }
        if self.last_seen_ms.len() < GATE_KEYS_MAX {
            self.last_seen_ms.insert(identity.to_string(), now_ms);
            return format!("{TENANT_POLICY}:{identity}");
        }
        self.aggregated += 1;
        OVERFLOW_KEY.to_string()
    }

    fn expire(&mut self, now_ms: u64) {
        self.last_seen_ms
            .retain(|_, seen| now_ms.saturating_sub(*seen) < GATE_IDLE_MS);
    }
}

pub fn run(opts: &RunOptions) -> Result<ScenarioReport, SimError> {
    let duration_s = opts.scale.pick(30, 8);
    let spray_per_step = opts.scale.pick(20u64, 10);
    let mut lc = LedgerConfig::root("global");
    lc.limits = LedgerLimits {
        keys_max: LEDGER_KEYS_MAX,
        leases_max: LEDGER_LEASES_MAX,
        ..LedgerLimits::default()
    };
    let mut ledger = Ledger::new(lc);
    for p in [
        policy(TENANT_POLICY, TENANT_RATE, TENANT_BURST),
        policy(OVERFLOW_POLICY, OVERFLOW_RATE, OVERFLOW_BURST),
    ] {
        ledger.apply(Nanos(0), Command::PutPolicy(p))?;
    }
    let mut gate = Gate {
        last_seen_ms: BTreeMap::new(),
        aggregated: 0,
    };
    let mut tenants: Vec<Holder> = (0..TENANTS)
        .map(|i| Holder::new(TENANT_POLICY, &format!("{TENANT_POLICY}:t{i}"), "enforcer"))
        .collect();
    let mut overflow = Holder::new(OVERFLOW_POLICY, OVERFLOW_KEY, "enforcer");
    let mut sprayed: BTreeMap<String, Holder> = BTreeMap::new();
    let mut log = PromiseLog::default();
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
    let steps = duration_s * 1_000 / STEP_MS;
    let per_s = 1_000 / STEP_MS;
    let mut row = vec![0u64; series.columns.len()];
    let (mut next_identity, mut refused) = (0u64, 0u64);
    for step in 0..steps {
        let now_ms = step * STEP_MS;
        let now = Nanos(now_ms * 1_000_000);
        gate.expire(now_ms);
        // Tenants: 150% of their rate each, established before the spray starts.
        for (i, t) in tenants.iter_mut().enumerate() {
            let identity = format!("t{i}");
            let key = gate.route(&identity, now_ms);
            debug_assert_eq!(key, t.key());
            let offered = (TENANT_RATE * 3 / 2 * STEP_MS).div_ceil(1_000);
            row[5] += t.step(&mut ledger, now, offered, TENANT_RATE);
        }
        // The spray: new identities every step, and unauthenticated traffic.
        let mut to_overflow = 20; // unauthenticated units this step
        for _ in 0..spray_per_step {
            let identity = format!("x{next_identity}");
            next_identity += 1;
            let key = gate.route(&identity, now_ms);
            if key == OVERFLOW_KEY {
                to_overflow += 1;
                continue;
            }
            let h = sprayed
                .entry(key.clone())
                .or_insert_with(|| Holder::new(TENANT_POLICY, &key, "enforcer"));
            if h.step(&mut ledger, now, 1, 1) == 0 {
                refused += 1;
            }
        }
        row[8] += spray_per_step;
        row[7] += overflow.step(&mut ledger, now, to_overflow, OVERFLOW_RATE);
        ledger.apply(now, Command::Tick).expect("tick never fails");
        sprayed.retain(|k, _| {
            gate.last_seen_ms
                .contains_key(k.trim_start_matches("tenant:"))
        });
        check_state(&mut log, &ledger, gate.last_seen_ms.len(), now.0);
        row[1] = row[1].max(ledger.accounts().count() as u64);
        row[2] = row[2].max(ledger.leases().count() as u64);
        row[3] = row[3].max(gate.last_seen_ms.len() as u64);
        if (step + 1) % per_s == 0 {
            row[0] = step / per_s;
            row[4] = LEDGER_KEYS_MAX as u64;
            row[6] = TENANTS as u64 * (TENANT_BURST + TENANT_RATE);
            series.push(std::mem::replace(&mut row, vec![0; 9]));
        }
    }
    let step_ns = STEP_MS * 1_000_000;
    let tenant_rate = Rate::per_second(TENANT_RATE).expect("positive");
    for t in &tenants {
        check_bound(&mut log, t, step_ns, tenant_rate, TENANT_BURST);
    }
    let overflow_rate = Rate::per_second(OVERFLOW_RATE).expect("positive");
    check_bound(&mut log, &overflow, step_ns, overflow_rate, OVERFLOW_BURST);
    let tenant_admitted: u64 = tenants.iter().map(Holder::admitted).sum();
    let tenant_entitled = TENANTS as u64 * TENANT_RATE * duration_s;
    let mut report = ScenarioReport {
        scenario: "key-spray".into(),
        seed: opts.seed,
        title: "Attacker key spraying".into(),
        about: "Four established tenants each offer 150% of their 100 units/s. An attacker \
                presents new identities every step, plus unauthenticated traffic. The enforcer \
                tracks at most 64 identities on their own keys (idle ones leave after a second); \
                the rest, and all unauthenticated traffic, are charged to one overflow key with \
                its own 50 units/s. The root ledger's keys and leases stay under their caps, \
                the overflow key stays within its own bound, and the tenants keep their share."
            .into(),
        checked: Promise::ALL.to_vec(),
        promises: log,
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
    report.fact("identities sprayed", next_identity);
    report.fact("aggregated into the overflow key", gate.aggregated);
    report.fact("sprayed requests refused by the ledger", refused);
    report.fact("tenants admitted", tenant_admitted);
    report.fact("tenants' sustained entitlement (R·T)", tenant_entitled);
    report.fact(
        "tenants' share of their entitlement (%)",
        tenant_admitted * 100 / tenant_entitled,
    );
    report.fact("overflow admitted", overflow.admitted());
    Ok(report)
}

fn check_state(log: &mut PromiseLog, ledger: &Ledger, gate_keys: usize, now: u64) {
    if !ledger.conserved() {
        log.record(Promise::NoDoubleSpend, now, || {
            "root ledger: a key's units no longer add up".into()
        });
    }
    let (keys, leases) = (ledger.accounts().count(), ledger.leases().count());
    if keys > LEDGER_KEYS_MAX || leases > LEDGER_LEASES_MAX || gate_keys > GATE_KEYS_MAX {
        log.record(Promise::BoundedState, now, || {
            format!("{keys} ledger keys, {leases} leases, {gate_keys} enforcer identities")
        });
    }
}

fn check_bound(log: &mut PromiseLog, h: &Holder, step_ns: u64, rate: Rate, burst: u64) {
    let c = check_windows(h.series(), step_ns, rate, burst);
    if c.violations > 0 {
        log.record(Promise::BudgetBound, c.worst_start as u64 * step_ns, || {
            format!(
                "key {}: {} windows over B + r·T, worst by {}",
                h.key(),
                c.violations,
                c.worst_excess
            )
        });
    }
}
