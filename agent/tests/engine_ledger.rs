//! Several agents spending credit slots fed from one ledger never admit more than the
//! ledger granted (P1 at the agents' end).
//!
//! The test plays a minimal lease manager: it drains each engine's acquire queue into
//! `Acquire` commands, deposits what the ledger grants, and tops slots up with `Report`s
//! that state exact usage (`deposited − remaining`).

use leasehold_agent::credit::{CreditSlot, SlotState};
use leasehold_agent::engine::{AcquireReceiver, AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_common::ledger::{
    Acquire, Command, Ledger, LedgerConfig, Outcome, PolicyParams, Report,
};
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use proptest::prelude::*;
use std::sync::Arc;

const POLICY: &str = "id: api\ndimensions: [{name: tenant, required: true}]\n\
                      rate: {units: 50, per: 1s}\nburst: 40\nlease: {max_credit: 15}\n";
const TENANTS: [&str; 2] = ["acme", "globex"];

/// One agent: its engine and the leases its lease manager holds, per key.
struct Agent {
    holder: String,
    engine: Engine,
    queue: AcquireReceiver,
    leases: Vec<Held>,
    admitted: u64,
}

struct Held {
    key: String,
    lease_id: u64,
    slot: Arc<CreditSlot>,
    deposited: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Admit {
        agent: usize,
        tenant: usize,
        hits: u64,
    },
    Acquire {
        agent: usize,
    },
    TopUp {
        agent: usize,
        tenant: usize,
        want: u64,
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..2usize, 1..4u64).prop_map(|(agent, tenant, hits)| Op::Admit { agent, tenant, hits }),
        1 => (0..3usize).prop_map(|agent| Op::Acquire { agent }),
        2 => (0..3usize, 0..2usize, 1..20u64).prop_map(|(agent, tenant, want)| Op::TopUp { agent, tenant, want }),
        1 => (1..200u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

struct World {
    ledger: Ledger,
    agents: Vec<Agent>,
    now: u64,
    granted: u64,
    request_id: u64,
}

impl World {
    fn new(agents: usize) -> World {
        let policy = Policy::from_yaml(POLICY).unwrap();
        let mut ledger = Ledger::new(LedgerConfig::root("root"));
        let params = PolicyParams::from_policy(&policy, 1).unwrap();
        ledger.apply(Nanos(0), Command::PutPolicy(params)).unwrap();
        let agents = (0..agents)
            .map(|i| {
                let engine = Engine::builder()
                    .build(RuleSource::from_policies([policy.clone()]))
                    .unwrap();
                let queue = engine.take_acquire_queue().unwrap();
                Agent {
                    holder: format!("agent-{i}"),
                    engine,
                    queue,
                    leases: Vec::new(),
                    admitted: 0,
                }
            })
            .collect();
        World {
            ledger,
            agents,
            now: 0,
            granted: 0,
            request_id: 0,
        }
    }

    fn next_request(&mut self) -> u64 {
        self.request_id += 1;
        self.request_id
    }

    fn deadline(&self, ttl_ms: u64) -> u64 {
        self.now + ttl_ms * 1_000_000
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Admit {
                agent,
                tenant,
                hits,
            } => {
                let count = self.agents.len();
                let agent = &mut self.agents[agent % count];
                let entries = [("tenant", TENANTS[tenant])];
                let dims = [Dimension::policy("api", &entries)];
                let req = AdmitRequest {
                    hits,
                    ..AdmitRequest::new(&dims)
                };
                if agent.engine.admit(&req, Nanos(self.now)).allowed {
                    agent.admitted += hits;
                }
            }
            Op::Acquire { agent } => self.acquire(agent % self.agents.len()),
            Op::TopUp {
                agent,
                tenant,
                want,
            } => self.top_up(agent % self.agents.len(), TENANTS[tenant], want),
            Op::Advance { ms } => self.now += ms * 1_000_000,
        }
    }

    fn acquire(&mut self, i: usize) {
        while let Ok(req) = self.agents[i].queue.try_recv() {
            let request_id = self.next_request();
            let command = Command::Acquire(Acquire {
                holder_id: self.agents[i].holder.clone(),
                policy_id: req.policy_id.to_string(),
                key: req.key.to_string(),
                want_credit: 10,
                demand_milli_per_sec: 0,
                request_id,
                priority: 0,
            });
            match self.ledger.apply(Nanos(self.now), command).unwrap() {
                Outcome::Granted(g) => {
                    self.granted += g.added;
                    req.slot.deposit(g.added, self.deadline(g.lease.ttl_ms));
                    req.slot.set_state(SlotState::Active);
                    self.agents[i].leases.push(Held {
                        key: req.key.to_string(),
                        lease_id: g.lease.lease_id,
                        slot: req.slot,
                        deposited: g.added,
                    });
                }
                _ => req.slot.set_state(SlotState::Denied),
            }
        }
    }

    fn top_up(&mut self, i: usize, tenant: &str, want: u64) {
        let key = format!("api:tenant={tenant}");
        let request_id = self.next_request();
        let holder = self.agents[i].holder.clone();
        let Some(held) = self.agents[i].leases.iter_mut().find(|h| h.key == key) else {
            return;
        };
        let command = Command::Report(Report {
            holder_id: holder,
            lease_id: held.lease_id,
            used: held.deposited - held.slot.remaining(),
            return_credit: 0,
            want_credit: want,
            demand_milli_per_sec: 0,
            request_id,
            priority: 0,
        });
        if let Ok(Outcome::Granted(g)) = self.ledger.apply(Nanos(self.now), command) {
            self.granted += g.added;
            held.deposited += g.added;
            let deadline = self.now + g.lease.ttl_ms * 1_000_000;
            held.slot.deposit(g.added, deadline);
            held.slot.set_state(SlotState::Active);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn agents_never_admit_more_than_the_ledger_granted(
        agents in 1..4usize,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut world = World::new(agents);
        for op in ops {
            world.apply(op);
            let admitted: u64 = world.agents.iter().map(|a| a.admitted).sum();
            prop_assert!(
                admitted <= world.granted,
                "admitted {} > granted {}", admitted, world.granted
            );
        }
        for agent in &world.agents {
            let spent: u64 = agent.leases.iter().map(|h| h.deposited - h.slot.remaining()).sum();
            prop_assert_eq!(spent, agent.admitted, "slots account for every admitted unit");
        }
        prop_assert!(world.ledger.conserved());
    }
}

#[test]
fn a_granted_lease_is_spent_exactly_to_its_credit() {
    let mut world = World::new(1);
    let admit = Op::Admit {
        agent: 0,
        tenant: 0,
        hits: 1,
    };
    world.apply(admit.clone());
    world.apply(Op::Acquire { agent: 0 });
    assert_eq!(world.granted, 10, "the ledger grants what was asked");
    for _ in 0..20 {
        world.apply(admit.clone());
    }
    assert_eq!(world.agents[0].admitted, 10);
    world.apply(Op::TopUp {
        agent: 0,
        tenant: 0,
        want: 5,
    });
    assert_eq!(world.granted, 15);
    for _ in 0..20 {
        world.apply(admit.clone());
    }
    assert_eq!(world.agents[0].admitted, 15);
}
