//! A real Envoy in front of a standalone `leasehold-agent`: Envoy's rate-limit filter asks
//! the agent about each request, passes the admitted ones to the upstream and answers the
//! rest with 429 itself.
//!
//! Needs an Envoy binary (`LEASEHOLD_ENVOY`, or `envoy` on `PATH`); without one each test
//! says so and passes.

mod support;

use std::path::Path;
use support::envoy::http1::{self, Response, Upstream};
use support::envoy::process::Agent;
use support::envoy::{envoy_or_skip, reset_s, wait_fresh_window, Action, Envoy, EnvoySpec};
use tempfile::TempDir;

/// envoyproxy/ratelimit rules the agent loads: each tenant gets 5 requests a minute.
const RULES: &str = "domain: edge\n\
                     descriptors:\n  \
                       - key: tenant\n    \
                         rate_limit: {unit: minute, requests_per_unit: 5}\n";
const LIMIT: usize = 5;
/// Requests sent past the limit.
const OVER: usize = 3;
/// Seconds a window must have left before a burst: the burst takes well under one.
const WINDOW_MARGIN_S: u64 = 10;

/// Upstream, agent and Envoy; dropped in field order, so Envoy goes first.
struct Stack {
    envoy: Envoy,
    agent: Agent,
    upstream: Upstream,
    _dir: TempDir,
}

/// The tenant's descriptor comes from the `x-tenant` header.
fn start(envoy_bin: &Path) -> Stack {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("ratelimit");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("edge.yaml"), RULES).unwrap();
    let upstream = Upstream::start();
    let agent = Agent::start(
        Path::new(env!("CARGO_BIN_EXE_leasehold-agent")),
        dir.path(),
        "agent",
        &[
            "--standalone",
            "--ratelimit-config",
            rules.to_str().unwrap(),
            // ratelimit-reset tells where the window ends.
            "--response-headers",
        ],
    );
    let spec = EnvoySpec {
        name: "envoy".into(),
        domain: "edge".into(),
        actions: vec![Action::header("x-tenant", "tenant")],
        ratelimit_port: agent.grpc_port,
        upstream_port: upstream.port,
    };
    let envoy = Envoy::start(envoy_bin, dir.path(), &spec);
    Stack {
        envoy,
        agent,
        upstream,
        _dir: dir,
    }
}

fn tenant(name: &str) -> [(&str, &str); 1] {
    [("x-tenant", name)]
}

/// `count` requests of `tenant` in a row.
fn burst(envoy: &Envoy, name: &str, count: usize) -> Vec<Response> {
    (0..count).map(|_| envoy.get("/", &tenant(name))).collect()
}

#[test]
fn envoy_answers_429_with_x_envoy_ratelimited_once_a_tenant_spent_its_limit() {
    let Some(envoy_bin) = envoy_or_skip() else {
        return;
    };
    let s = start(&envoy_bin);
    wait_fresh_window(&s.envoy, &tenant("probe"), WINDOW_MARGIN_S);
    let served_before = s.upstream.served();

    let acme = burst(&s.envoy, "acme", LIMIT + OVER);
    let resets: Vec<u64> = acme.iter().map(reset_s).collect();
    assert!(
        resets.windows(2).all(|w| w[1] <= w[0]),
        "the burst crossed a window boundary (ratelimit-reset {resets:?})"
    );
    for (i, r) in acme[..LIMIT].iter().enumerate() {
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, "ok"),
            "request {} of {LIMIT} reaches the upstream: {r:?}",
            i + 1
        );
        assert_eq!(r.header("x-envoy-ratelimited"), None, "{r:?}");
        let remaining = (LIMIT - 1 - i).to_string();
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some(remaining.as_str()),
            "{r:?}"
        );
    }
    for (i, r) in acme[LIMIT..].iter().enumerate() {
        assert_eq!(
            r.status,
            429,
            "request {} is over {LIMIT}: {r:?}",
            LIMIT + 1 + i
        );
        assert_eq!(r.header("x-envoy-ratelimited"), Some("true"), "{r:?}");
        assert_eq!(r.header("ratelimit-remaining"), Some("0"), "{r:?}");
    }
    assert_eq!(
        s.upstream.served() - served_before,
        LIMIT,
        "refused requests never reach the upstream"
    );

    let globex = s.envoy.get("/", &tenant("globex"));
    assert_eq!(
        (globex.status, globex.body.as_str()),
        (200, "ok"),
        "another tenant has its own {LIMIT}: {globex:?}"
    );
    assert_eq!(globex.header("ratelimit-remaining"), Some("4"));
    // Without the header Envoy builds no descriptor and does not ask the agent.
    let anonymous = s.envoy.get("/", &[]);
    assert_eq!(anonymous.status, 200, "{anonymous:?}");
    assert_eq!(anonymous.header("ratelimit-limit"), None, "{anonymous:?}");
}

/// `cluster.upstream.ratelimit.<name>` from Envoy's admin stats: the rate-limit filter
/// counts its outcomes under the route's cluster, creating each counter on first use.
fn ratelimit_stat(envoy: &Envoy, name: &str) -> u64 {
    let stat = format!("cluster.upstream.ratelimit.{name}");
    let r = http1::get(envoy.admin_port, &format!("/stats?filter=^{stat}$"), &[])
        .unwrap_or_else(|e| panic!("Envoy admin /stats: {e}"));
    assert_eq!(r.status, 200, "Envoy admin /stats: {r:?}");
    let prefix = format!("{stat}: ");
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| {
            v.trim()
                .parse()
                .unwrap_or_else(|e| panic!("{stat}: {v:?}: {e}"))
        })
}

#[test]
fn envoy_lets_requests_through_when_the_agent_is_gone() {
    let Some(envoy_bin) = envoy_or_skip() else {
        return;
    };
    let s = start(&envoy_bin);
    wait_fresh_window(&s.envoy, &tenant("probe"), WINDOW_MARGIN_S);
    // A tenant over its limit: a 200 for it below can only come from failing open.
    let spent = burst(&s.envoy, "acme", LIMIT + 1);
    let statuses: Vec<u16> = spent.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "{spent:?}");
    assert_eq!(ratelimit_stat(&s.envoy, "failure_mode_allowed"), 0);

    drop(s.agent);
    let r = s.envoy.get("/", &tenant("acme"));
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "ok"),
        "failure_mode_deny is off: {r:?}"
    );
    assert_eq!(r.header("x-envoy-ratelimited"), None, "{r:?}");
    assert_eq!(ratelimit_stat(&s.envoy, "failure_mode_allowed"), 1);
}

#[test]
fn every_action_kind_makes_a_bootstrap_envoy_accepts() {
    let Some(envoy_bin) = envoy_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = EnvoySpec {
        name: "validate".into(),
        domain: "edge \"quoted\"".into(),
        actions: vec![
            Action::header("x-tenant", "tenant"),
            Action::generic("route", "api"),
            Action::RemoteAddress,
        ],
        ratelimit_port: 1,
        upstream_port: 2,
    };
    let config = dir.path().join("validate.yaml");
    std::fs::write(&config, support::envoy::bootstrap(&spec, 3, 4)).unwrap();
    let out = std::process::Command::new(&envoy_bin)
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "envoy --mode validate refused:\n{}\n{}",
        std::fs::read_to_string(&config).unwrap(),
        String::from_utf8_lossy(&out.stderr)
    );
}
