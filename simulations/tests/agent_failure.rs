//! Failure behaviours of leased policies against a real allocator over mutual-TLS gRPC that
//! goes away, and against an address where nothing listens:
//!
//! * `fail_closed` refuses as soon as the allocator is found unreachable, credit or not;
//! * `cached_lease` spends the credit it holds, then refuses;
//! * `fail_open` admits, uncharged, and counts those admissions apart (also in metrics);
//! * `restricted` admits only priority ≥ `min_priority`, at its local emergency rate.

mod hierarchy_support;
// The allocator's in-process service fixture, shared rather than copied.
#[path = "../../allocator/tests/service_support/mod.rs"]
mod service_support;

use hierarchy_support::agents::{manager_config, spawn_agent, Agent};
use hierarchy_support::channels;
use leasehold_agent::api::metrics;
use leasehold_agent::engine::{AdmitRequest, DenyReason, Dimension, Outcome};
use leasehold_allocator::replica::Replica;
use leasehold_common::policy::Policy;
use leasehold_common::time::Clock;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, Role};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Policy id and its `failure:` block.
const POLICIES: [(&str, &str); 4] = [
    ("closed", "{mode: fail_closed}"),
    ("cached", "{mode: cached_lease}"),
    ("open", "{mode: fail_open}"),
    (
        "restricted",
        "{mode: restricted, min_priority: 5, rate: {units: 5, per: 1s}}",
    ),
];
/// Restricted operation admits at most this many per second (and as many at once).
const RESTRICTED_PER_S: u64 = 5;
const LEASE_TTL_MS: u64 = 2_000;
/// Traffic pace: one request per policy (and per priority) every this many milliseconds.
const PACE_MS: u64 = 10;
const HIGH: u8 = 9;
const LOW: u8 = 1;
/// The engine's default wait for a lease before the failure behaviour applies.
const ACQUIRE_WAIT_MAX_MS: u64 = 250;

fn policy(id: &str, failure: &str) -> String {
    format!(
        "id: {id}\ndimensions: [{{name: tenant}}]\nkey: [tenant]\nrate: {{units: 1000, per: 1s}}\n\
         burst: 1000\nscope: global\nlease: {{ttl: {LEASE_TTL_MS}ms, refresh_horizon: 200ms, \
         reserve_fraction: 0}}\nfailure: {failure}\n"
    )
}

fn start_agent(allocator: &str, channels: ChannelFactory) -> Agent {
    let policies = POLICIES
        .iter()
        .map(|(id, failure)| Policy::from_yaml(&policy(id, failure)).unwrap());
    let mut cfg = manager_config("gw-1");
    // As the policies' own `refresh_horizon`: renew ahead by that much, not by the default
    // horizon, which is as long as the whole lease here.
    cfg.holder.refresh_horizon_ms = 200;
    spawn_agent(channels, allocator, policies.collect(), cfg)
}

impl Agent {
    fn admit(&self, policy: &str, priority: u8) -> Outcome {
        let entries = [("tenant", "acme")];
        let dims = [Dimension::policy(policy, &entries)];
        let req = AdmitRequest {
            priority,
            ..AdmitRequest::new(&dims)
        };
        self.engine.admit(&req, self.clock.now()).results[0].outcome
    }

    fn counters(&self, policy: &str) -> leasehold_agent::engine::PolicyCountersSnapshot {
        let stats = self.engine.stats();
        stats
            .policies
            .iter()
            .find(|p| p.policy_id == policy)
            .expect("policy")
            .counters
    }
}

/// Outcomes seen by one stream of requests (a policy at one priority), in order, with the
/// milliseconds since the stream's origin.
type Seen = BTreeMap<(&'static str, u8), Vec<(u64, Outcome)>>;

/// Sends paced traffic to every policy (the restricted one at a high and a low priority)
/// for `run_for`, recording every outcome.
async fn traffic(agent: &Agent, run_for: Duration) -> Seen {
    let mut seen = Seen::new();
    let origin = Instant::now();
    while origin.elapsed() < run_for {
        let at_ms = origin.elapsed().as_millis() as u64;
        for (id, _) in POLICIES {
            let mut record = |priority| {
                let outcome = agent.admit(id, priority);
                seen.entry((id, priority))
                    .or_default()
                    .push((at_ms, outcome));
            };
            record(HIGH);
            if id == "restricted" {
                record(LOW);
            }
        }
        tokio::time::sleep(Duration::from_millis(PACE_MS)).await;
    }
    seen
}

fn count(seen: &[(u64, Outcome)], outcome: Outcome) -> u64 {
    seen.iter().filter(|(_, o)| *o == outcome).count() as u64
}

/// The time of the first outcome matching `pred`, and everything from there on.
fn from_first(seen: &[(u64, Outcome)], pred: impl Fn(Outcome) -> bool) -> (u64, &[(u64, Outcome)]) {
    let i = seen
        .iter()
        .position(|(_, o)| pred(*o))
        .unwrap_or_else(|| panic!("never happened: {seen:?}"));
    (seen[i].0, &seen[i..])
}

/// Every outcome is one of `expected`, except for the wait for a new lease when the
/// expired one is asked for again: at most one acquire wait of `AwaitingLease` answers.
fn assert_only(seen: &[(u64, Outcome)], expected: &[Outcome]) {
    let waiting = |o: &Outcome| *o == Outcome::Denied(DenyReason::AwaitingLease);
    let unexpected: Vec<_> = seen
        .iter()
        .filter(|(_, o)| !expected.contains(o) && !waiting(o))
        .collect();
    assert!(
        unexpected.is_empty(),
        "expected only {expected:?}: {unexpected:?}"
    );
    let waits: Vec<u64> = seen
        .iter()
        .filter(|(_, o)| waiting(o))
        .map(|(at, _)| *at)
        .collect();
    if let (Some(first), Some(last)) = (waits.first(), waits.last()) {
        assert!(
            last - first <= ACQUIRE_WAIT_MAX_MS + PACE_MS,
            "waited for a lease from {first} to {last} ms"
        );
    }
}

/// The restricted policy's high-priority stream admits at the emergency rate only, its
/// low-priority stream not at all, and neither spends leased credit.
fn assert_restricted(seen: &Seen, window_ms: u64) {
    let high = &seen[&("restricted", HIGH)];
    let (_, after) = from_first(high, |o| o == Outcome::Restricted);
    let admitted = count(high, Outcome::Restricted);
    let bound = RESTRICTED_PER_S + RESTRICTED_PER_S * window_ms.div_ceil(1_000);
    assert!(
        (RESTRICTED_PER_S..=bound).contains(&admitted),
        "{admitted} admitted under restricted operation in {window_ms} ms, at most {bound}"
    );
    assert_only(
        after,
        &[Outcome::Restricted, Outcome::Denied(DenyReason::Restricted)],
    );
    let low = &seen[&("restricted", LOW)];
    let (_, after) = from_first(low, |o| o == Outcome::Denied(DenyReason::Restricted));
    assert_only(after, &[Outcome::Denied(DenyReason::Restricted)]);
}
/// Failing open: once the first uncharged admission happens, every request is admitted
/// that way, and the engine and its metrics count exactly those.
fn assert_fail_open(agent: &Agent, seen: &Seen) -> u64 {
    let open = &seen[&("open", HIGH)];
    let (_, after) = from_first(open, |o| o == Outcome::FailOpen);
    assert_only(after, &[Outcome::FailOpen]);
    let fail_open = count(open, Outcome::FailOpen);
    assert_eq!(agent.counters("open").fail_open, fail_open);
    let text = metrics::render(&agent.engine.stats(), &Default::default());
    let line = format!("leasehold_agent_fail_open_units_total{{policy=\"open\"}} {fail_open}\n");
    assert!(text.contains(&line), "metrics lack `{line}`:\n{text}");
    fail_open
}

async fn outstanding(c: &service_support::Cluster, policy: &str) -> u64 {
    let key = format!("{policy}:tenant=acme");
    c.replica
        .read(move |s| s.ledger().account(&key).expect("leased key").outstanding)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_behaviour_holds_when_the_allocator_goes_away() {
    let c = service_support::start().await;
    for (id, failure) in POLICIES {
        c.admin()
            .apply_policy(pb::ApplyPolicyRequest {
                yaml: policy(id, failure),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let addr = c.addr;
    let agent = start_agent(&addr.to_string(), channels(&c.pki, Role::Agent, "gw-1"));

    // Leases first: every policy admits against leased credit, demand measured.
    let before = traffic(&agent, Duration::from_millis(600)).await;
    let leased = [
        Outcome::Admitted,
        Outcome::Denied(DenyReason::AwaitingLease),
        Outcome::Denied(DenyReason::OverLimit),
    ];
    for (key, seen) in &before {
        let admitted = count(seen, Outcome::Admitted) as usize;
        assert!(
            admitted * 2 >= seen.len() && seen.iter().all(|(_, o)| leased.contains(o)),
            "{key:?} runs on a lease: {seen:?}"
        );
    }
    // What the cached policy may still spend: granted and not reported used.
    let cached_credit = outstanding(&c, "cached").await;
    assert!(cached_credit > 0);

    // The allocator goes away while traffic goes on (a pause would shrink the measured
    // demand, and with it the credit the agent keeps).
    drop(c);
    let window_ms = LEASE_TTL_MS + 1_000;
    let after = traffic(&agent, Duration::from_millis(window_ms)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the allocator is gone"
    );

    // fail_closed: refused from the moment the allocator is found unreachable, long
    // before its lease would have run out, and never admitted again.
    let closed = &after[&("closed", HIGH)];
    let (closed_at_ms, rest) = from_first(closed, |o| !o.allows());
    assert_eq!(rest[0].1, Outcome::Denied(DenyReason::Unreachable));
    assert!(rest.iter().all(|(_, o)| !o.allows()), "{rest:?}");
    assert!(
        closed_at_ms < LEASE_TTL_MS / 2,
        "refused at {closed_at_ms} ms"
    );

    // cached_lease: keeps spending after fail_closed refuses, at most what it held, then
    // refuses for good.
    let cached = &after[&("cached", HIGH)];
    let spent = count(cached, Outcome::Admitted);
    assert!(
        cached
            .iter()
            .any(|(at, o)| *at > closed_at_ms && o.allows()),
        "cached credit is spent while fail_closed refuses: {cached:?}"
    );
    assert!(
        spent <= cached_credit,
        "spent {spent}, held {cached_credit}"
    );
    let (_, rest) = from_first(cached, |o| !o.allows());
    assert!(rest.iter().all(|(_, o)| !o.allows()), "{rest:?}");
    assert!(
        rest.iter()
            .any(|(_, o)| *o == Outcome::Denied(DenyReason::Unreachable)),
        "{rest:?}"
    );

    let fail_open = assert_fail_open(&agent, &after);
    assert!(fail_open > 0);
    assert_restricted(&after, window_ms);
    agent.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocator_address_where_nothing_listens_gets_each_failure_behaviour_at_once() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = listener.local_addr().unwrap();
    drop(listener);
    let plaintext = ChannelFactory::new(ChannelSettings::default(), ClientTransport::Plaintext);
    let agent = start_agent(&dead.to_string(), plaintext.unwrap());
    let window_ms = 1_200;
    let seen = traffic(&agent, Duration::from_millis(window_ms)).await;

    // No lease ever: nothing is admitted against credit by any policy.
    for (key, outcomes) in &seen {
        assert_eq!(count(outcomes, Outcome::Admitted), 0, "{key:?}");
    }
    for id in ["closed", "cached"] {
        let outcomes = &seen[&(id, HIGH)];
        assert!(outcomes.iter().all(|(_, o)| !o.allows()), "{id}");
        let (at_ms, rest) = from_first(outcomes, |o| o == Outcome::Denied(DenyReason::Unreachable));
        assert!(
            at_ms < 1_000,
            "{id} found the allocator unreachable at {at_ms} ms"
        );
        assert!(
            rest.iter()
                .all(|(_, o)| *o == Outcome::Denied(DenyReason::Unreachable)),
            "{id}: {rest:?}"
        );
    }
    assert!(assert_fail_open(&agent, &seen) > 0);
    assert_restricted(&seen, window_ms);
    agent.shut_down().await;
}
