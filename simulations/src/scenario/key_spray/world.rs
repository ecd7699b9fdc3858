//! The root ledger, the enforcer's gate, the tenants' and the attacker's holders, stepped
//! together, with P2 and P4 checked after every step.

use super::holder::Holder;
use super::*;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// What one step admitted.
#[derive(Copy, Clone, Debug, Default)]
pub struct StepFigures {
    pub tenants: u64,
    pub overflow: u64,
    pub sprayed: u64,
}

pub struct World {
    pub ledger: Ledger,
    pub gate: Gate,
    pub tenants: Vec<Holder>,
    pub overflow: Holder,
    sprayed: BTreeMap<String, Holder>,
    pub log: PromiseLog,
    pub identities: u64,
    pub refused: u64,
    spray_per_step_max: u64,
    rng: ChaCha8Rng,
}

impl World {
    pub fn new(seed: u64, spray_per_step_max: u64) -> Result<Self, SimError> {
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
        let tenants = (0..TENANTS)
            .map(|i| Holder::new(TENANT_POLICY, &format!("{TENANT_POLICY}:t{i}"), HOLDER))
            .collect();
        Ok(World {
            ledger,
            gate: Gate::default(),
            tenants,
            overflow: Holder::new(OVERFLOW_POLICY, OVERFLOW_KEY, HOLDER),
            sprayed: BTreeMap::new(),
            log: PromiseLog::default(),
            identities: 0,
            refused: 0,
            spray_per_step_max,
            rng: ChaCha8Rng::seed_from_u64(seed),
        })
    }

    pub fn step(&mut self, now_ms: u64) -> StepFigures {
        let now = Nanos(now_ms * 1_000_000);
        let mut out = StepFigures::default();
        self.gate.expire(now_ms);
        // The tenants offer 150% of their rate each, and were there before the spray.
        for (i, t) in self.tenants.iter_mut().enumerate() {
            let key = self.gate.route(&format!("t{i}"), now_ms);
            debug_assert_eq!(key, t.key());
            let offered = (TENANT_RATE * 3 / 2 * STEP_MS).div_ceil(1_000);
            out.tenants += t.step(&mut self.ledger, now, offered, TENANT_RATE);
        }
        let mut to_overflow = self.rng.random_range(0..=UNAUTHENTICATED_PER_STEP_MAX);
        let spray = self.rng.random_range(1..=self.spray_per_step_max);
        out.sprayed = spray;
        for _ in 0..spray {
            let identity = format!("x{}", self.identities);
            self.identities += 1;
            let key = self.gate.route(&identity, now_ms);
            if key == OVERFLOW_KEY {
                to_overflow += 1;
                continue;
            }
            let h = self
                .sprayed
                .entry(key.clone())
                .or_insert_with(|| Holder::new(TENANT_POLICY, &key, HOLDER));
            if h.step(&mut self.ledger, now, 1, 1) == 0 {
                self.refused += 1;
            }
        }
        out.overflow = self
            .overflow
            .step(&mut self.ledger, now, to_overflow, OVERFLOW_RATE);
        self.ledger
            .apply(now, Command::Tick)
            .expect("tick never fails");
        let gate = &self.gate;
        self.sprayed.retain(|k, _| gate.tracks_key(k));
        self.check_state(now.0);
        out
    }

    fn check_state(&mut self, now: u64) {
        if !self.ledger.conserved() {
            self.log.record(Promise::NoDoubleSpend, now, || {
                "root ledger: a key's units no longer add up".into()
            });
        }
        let keys = self.ledger.accounts().count();
        let leases = self.ledger.leases().count();
        let gate_keys = self.gate.len();
        if keys > LEDGER_KEYS_MAX || leases > LEDGER_LEASES_MAX || gate_keys > GATE_KEYS_MAX {
            self.log.record(Promise::BoundedState, now, || {
                format!("{keys} ledger keys, {leases} leases, {gate_keys} enforcer identities")
            });
        }
    }

    /// P1 for every tenant key and for the overflow key, each against its own policy.
    pub fn check_bounds(&mut self) {
        let tenant_rate = Rate::per_second(TENANT_RATE).expect("positive");
        for t in &self.tenants {
            check_bound(&mut self.log, t, tenant_rate, TENANT_BURST);
        }
        let overflow_rate = Rate::per_second(OVERFLOW_RATE).expect("positive");
        check_bound(&mut self.log, &self.overflow, overflow_rate, OVERFLOW_BURST);
    }
}

fn check_bound(log: &mut PromiseLog, h: &Holder, rate: Rate, burst: u64) {
    let step_ns = STEP_MS * 1_000_000;
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
