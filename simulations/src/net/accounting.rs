//! P7 on the enforcers: what each agent's engine counted against what its traffic loop saw.
//!
//! The traffic loop knows what it offered and what each decision said; the engine counts
//! the same requests in its per-policy counters (the figures `/metrics` exports). Each run
//! of an agent's software (one start to its crash, or to the end) is compared once: at the
//! agent's next start, or at the end of the run.

use leasehold_agent::engine::{Engine, Outcome};
use leasehold_common::time::RollbackStats;
use std::sync::{Arc, Mutex};

/// What one run of an agent's software offered and how its decisions came out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub offered: u64,
    /// Charged against the lease.
    pub admitted: u64,
    pub rejected: u64,
    /// Admitted uncharged because the grantor was unreachable and the policy fails open.
    pub fail_open: u64,
    /// Admitted at the local emergency rate while restricted.
    pub restricted: u64,
}

impl Tally {
    /// Counts one decision whose only dimension came out as `outcome`.
    pub fn count(&mut self, outcome: Outcome) {
        self.offered += 1;
        match outcome {
            Outcome::Admitted => self.admitted += 1,
            Outcome::FailOpen => self.fail_open += 1,
            Outcome::Restricted => self.restricted += 1,
            _ => self.rejected += 1,
        }
    }
}

/// A mismatch between an agent run's engine counters and its traffic loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Miscount {
    pub agent: u32,
    /// The software start it happened in (1 for the first).
    pub start: u32,
    pub engine: Tally,
    pub seen: Tally,
}

struct Run {
    start: u32,
    engine: Arc<Engine>,
    seen: Tally,
}

/// The current run of every agent, and the runs compared so far.
#[derive(Clone, Default)]
pub struct Accounts {
    runs: Arc<Mutex<Vec<Option<Run>>>>,
    checked: Arc<Mutex<(u64, Vec<Miscount>)>>,
    /// Per agent, the clock readings its engines clamped because they stepped back, summed
    /// over the runs compared so far.
    clock: Arc<Mutex<Vec<RollbackStats>>>,
}

impl Accounts {
    pub fn new(agents: usize) -> Self {
        Accounts {
            runs: Arc::new(Mutex::new((0..agents).map(|_| None).collect())),
            checked: Arc::default(),
            clock: Arc::new(Mutex::new(vec![RollbackStats::default(); agents])),
        }
    }

    /// Starts a new run of `agent`'s software with `engine`, comparing its previous run.
    pub fn started(&self, agent: usize, start: u32, engine: Arc<Engine>, policy_id: &str) {
        let fresh = Run {
            start,
            engine,
            seen: Tally::default(),
        };
        let previous = self
            .lock()
            .get_mut(agent)
            .and_then(|slot| slot.replace(fresh));
        if let Some(run) = previous {
            self.compare(agent, &run, policy_id);
        }
    }

    /// Counts one of `agent`'s decisions.
    pub fn count(&self, agent: usize, outcome: Outcome) {
        if let Some(Some(run)) = self.lock().get_mut(agent) {
            run.seen.count(outcome);
        }
    }

    /// Compares every agent's current run; returns how many runs were compared in all and
    /// the mismatches.
    pub fn finish(&self, policy_id: &str) -> (u64, Vec<Miscount>) {
        let runs: Vec<(usize, Run)> = self
            .lock()
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.take()?)))
            .collect();
        for (agent, run) in &runs {
            self.compare(*agent, run, policy_id);
        }
        self.checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Per agent, the clock steps back its engines clamped over the runs compared so far
    /// (all of them once [`Accounts::finish`] has run).
    pub fn clock_rollbacks(&self) -> Vec<RollbackStats> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn compare(&self, agent: usize, run: &Run, policy_id: &str) {
        let stepped = run.engine.stats().clock;
        if let Some(c) = self
            .clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(agent)
        {
            c.rollbacks += stepped.rollbacks;
            c.rollback_ns += stepped.rollback_ns;
        }
        let engine = engine_tally(&run.engine, policy_id);
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        checked.0 += 1;
        if engine != run.seen {
            checked.1.push(Miscount {
                agent: agent as u32,
                start: run.start,
                engine,
                seen: run.seen,
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Run>>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The engine's counters for `policy_id` as a tally.
fn engine_tally(engine: &Engine, policy_id: &str) -> Tally {
    let stats = engine.stats();
    let Some(p) = stats.policies.iter().find(|p| p.policy_id == policy_id) else {
        return Tally::default();
    };
    let c = &p.counters;
    Tally {
        offered: c.offered,
        admitted: c.admitted,
        rejected: c.rejected,
        fail_open: c.fail_open,
        restricted: c.restricted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_agent::engine::{AdmitRequest, Dimension, RuleSource};
    use leasehold_common::policy::Policy;
    use leasehold_common::time::Nanos;

    fn engine() -> Arc<Engine> {
        let yaml = "id: api\ndimensions: [{name: tenant}]\nrate: {units: 1, per: 1h}\nburst: 2\nscope: process\n";
        let policy = Policy::from_yaml(yaml).unwrap();
        Arc::new(
            Engine::builder()
                .build(RuleSource::from_policies([policy]))
                .unwrap(),
        )
    }

    fn offer(accounts: &Accounts, engine: &Engine, counted: bool) {
        let entries = [("tenant", "acme")];
        let dims = [Dimension::policy("api", &entries)];
        let d = engine.admit(&AdmitRequest::new(&dims), Nanos(1));
        if counted {
            accounts.count(0, d.results[0].outcome);
        }
    }

    #[test]
    fn a_run_agrees_only_when_every_decision_was_seen() {
        let accounts = Accounts::new(1);
        let first = engine();
        accounts.started(0, 1, Arc::clone(&first), "api");
        for _ in 0..3 {
            offer(&accounts, &first, true);
        }
        // The second run's engine decides once more than its traffic loop noted.
        let second = engine();
        accounts.started(0, 2, Arc::clone(&second), "api");
        offer(&accounts, &second, true);
        offer(&accounts, &second, false);
        let (checked, miscounts) = accounts.finish("api");
        assert_eq!(checked, 2);
        assert_eq!(miscounts.len(), 1, "{miscounts:?}");
        let m = &miscounts[0];
        assert_eq!((m.agent, m.start), (0, 2));
        assert_eq!((m.engine.offered, m.seen.offered), (2, 1));
        assert_eq!(m.seen.admitted, 1);
        // Every reading was at the same instant: nothing stepped back.
        assert_eq!(accounts.clock_rollbacks(), vec![RollbackStats::default()]);
    }
}
