//! Two real Envoy replicas, each with its own `leasehold-agent` leasing from one allocator,
//! share one envoyproxy/ratelimit rule applied at the allocator: 5 per minute lets 5
//! requests through in total, whichever Envoy they reach; every other request is answered
//! 429 with `x-envoy-ratelimited`. Skipped (saying so) where no `envoy` binary is found.

mod process_support;

#[path = "../../agent/tests/support/envoy/mod.rs"]
mod envoy;

use envoy::http1::Upstream;
use envoy::process::Agent;
use envoy::{envoy_or_skip, Action, Envoy, EnvoySpec};
use process_support::{agent_binary, ctl_insecure, start_insecure_allocator};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const RULE: &str = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
";
const LIMIT: usize = 5;
/// Requests sent through the two Envoys in turn.
const SENT: usize = 14;
/// Pause between requests: an agent asks for its first lease on the first request it sees
/// and refuses while it waits; later requests find the lease there.
const PAUSE: Duration = Duration::from_millis(150);
/// Latest second of a minute the burst may start at and still end inside that minute.
const START_SECOND_MAX: u64 = 45;

/// UNIX seconds now: rule windows are aligned to UNIX minutes on the allocator's timeline.
fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn two_envoys_with_their_own_agents_share_one_rule() {
    let Some(envoy_bin) = envoy_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    let rules = dir.join("edge.yaml");
    std::fs::write(&rules, RULE).unwrap();
    let applied = ctl_insecure(&server, &["policy", "apply", "-f", rules.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    let agent_bin = agent_binary();
    let upstream = Upstream::start();
    let gateways: Vec<(Agent, Envoy)> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let holder = format!("gw-{name}");
            let args = ["--allocator", &server, "--insecure", "--holder-id", &holder];
            let agent = Agent::start(&agent_bin, dir, &format!("agent-{name}"), &args);
            let spec = EnvoySpec {
                name: format!("envoy-{name}"),
                domain: "edge".into(),
                actions: vec![Action::header("x-tenant", "tenant")],
                ratelimit_port: agent.grpc_port,
                upstream_port: upstream.port,
            };
            let proxy = Envoy::start(&envoy_bin, dir, &spec);
            (agent, proxy)
        })
        .collect();

    let second = unix_s() % 60;
    if second > START_SECOND_MAX {
        std::thread::sleep(Duration::from_secs(60 - second) + Duration::from_millis(300));
    }
    let minute = unix_s() / 60;
    let tenant = [("x-tenant", "acme")];
    let mut passed = 0;
    for i in 0..SENT {
        let (_, proxy) = &gateways[i % gateways.len()];
        let r = proxy.get("/", &tenant);
        match r.status {
            200 => passed += 1,
            429 => assert_eq!(
                r.header("x-envoy-ratelimited"),
                Some("true"),
                "a 429 not from the rate limit: {r:?}"
            ),
            other => panic!("request {i} answered {other}: {r:?}"),
        }
        std::thread::sleep(PAUSE);
    }
    assert_eq!(unix_s() / 60, minute, "the burst crossed a minute");
    assert_eq!(
        passed, LIMIT,
        "both Envoys together let through {passed} of {SENT}"
    );
    assert_eq!(upstream.served(), LIMIT, "the upstream saw what passed");
    // Another tenant has its own count under the same rule (its first request may wait
    // for its key's first lease).
    let (_, proxy) = &gateways[1];
    let other_passed = (0..5).any(|_| {
        let ok = proxy.get("/", &[("x-tenant", "globex")]).status == 200;
        std::thread::sleep(PAUSE);
        ok
    });
    assert!(other_passed, "another tenant was refused too");
}
