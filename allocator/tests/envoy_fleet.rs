//! envoyproxy/ratelimit rules fleet-wide, from the binaries: `leasectl policy apply -f` of a
//! directory mixing a domain file and a policy document at one allocator, two agents
//! started with `--allocator`, and Envoy RLS requests to both. A rule of 5 per minute admits
//! exactly 5 across both agents within one minute, as envoyproxy/ratelimit's shared counter
//! does; every other request is OVER_LIMIT.

mod process_support;

use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use leasehold_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use process_support::{
    agent_binary, ctl_insecure, free_port, json, spawn_logged, start_insecure_allocator,
    wait_agent_ready, Proc,
};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const EDGE: &str = "\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
";
const MOBILE: &str = "\
domain: mobile
descriptors:
  - key: app
    rate_limit: {unit: minute, requests_per_unit: 3}
";
const POLICY: &str = "id: api\ndimensions: [{name: tenant}]\nrate: {units: 50, per: 1s}\n";
/// Requests sent per descriptor, alternating between the agents.
const SENT: usize = 16;
/// Pause between requests: the run takes a few seconds, so that an agent waiting for its
/// first lease has it long before the run ends.
const PAUSE: Duration = Duration::from_millis(150);
/// Latest second of a minute a run may start at and still end inside that minute.
const START_SECOND_MAX: u64 = 40;

fn start_agent(bin: &Path, dir: &Path, server: &str, holder: &str) -> (Proc, u16) {
    let (grpc, http) = (free_port(), free_port());
    let mut cmd = Command::new(bin);
    cmd.args(["--allocator", server, "--insecure", "--holder-id", holder])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")]);
    let proc = spawn_logged(cmd, &dir.join(format!("agent-{holder}.log")));
    wait_agent_ready(http);
    (proc, grpc)
}

fn request(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 1,
    }
}

fn minute_now() -> (u64, u64) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (secs / 60, secs % 60)
}

/// Sleeps until a minute has at least 20 seconds left, so a run stays inside one window of
/// the rules (windows are aligned to UNIX minutes).
fn wait_for_room_in_the_minute() {
    let (_, second) = minute_now();
    if second > START_SECOND_MAX {
        std::thread::sleep(Duration::from_secs(60 - second) + Duration::from_millis(200));
    }
}

/// OK answers per descriptor, `SENT` requests each, alternating between the agents. Panics
/// on an answer that is neither OK nor OVER_LIMIT. `None` when the run crossed a minute.
fn run(agents: &[u16], descriptors: &[RateLimitRequest]) -> Option<Vec<usize>> {
    wait_for_room_in_the_minute();
    let (minute, _) = minute_now();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ok = rt.block_on(async {
        let mut clients = Vec::new();
        for port in agents {
            let c = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
                .await
                .unwrap();
            clients.push(c);
        }
        let mut ok = vec![0; descriptors.len()];
        for i in 0..SENT {
            for (d, req) in descriptors.iter().enumerate() {
                let agent = (i + d) % clients.len();
                let c = &mut clients[agent];
                let code = c
                    .should_rate_limit(req.clone())
                    .await
                    .unwrap()
                    .into_inner()
                    .overall_code;
                match Code::try_from(code) {
                    Ok(Code::Ok) => ok[d] += 1,
                    Ok(Code::OverLimit) => {}
                    other => panic!("request {i} of descriptor {d}: {other:?}"),
                }
            }
            tokio::time::sleep(PAUSE).await;
        }
        ok
    });
    (minute_now().0 == minute).then_some(ok)
}

#[test]
fn two_agents_share_each_rules_budget_across_domains() {
    let bin = agent_binary();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    let rules = dir.join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("edge.yaml"), EDGE).unwrap();
    std::fs::write(rules.join("mobile.yml"), MOBILE).unwrap();
    std::fs::write(rules.join("api.yaml"), POLICY).unwrap();
    std::fs::write(rules.join("README.txt"), "not a rule").unwrap();
    let applied = json(&ctl_insecure(
        &server,
        &["policy", "apply", "-f", rules.to_str().unwrap()],
    ));
    let ids: Vec<&str> = applied
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["api", "ratelimit-edge", "ratelimit-mobile"]);
    let got = json(&ctl_insecure(&server, &["policy", "get", "ratelimit-edge"]));
    let rule_policy = got["rules"][0]["policy_id"].as_str().unwrap().to_owned();
    assert!(rule_policy.starts_with("envoy-edge-tenant-"), "{got}");

    let (_a, a) = start_agent(&bin, dir, &server, "gw-1");
    let (_b, b) = start_agent(&bin, dir, &server, "gw-2");
    let descriptors = [
        request("edge", "tenant", "acme"),
        request("mobile", "app", "ios"),
        request("other", "tenant", "acme"),
    ];
    let ok = run(&[a, b], &descriptors)
        .or_else(|| run(&[a, b], &descriptors))
        .expect("a run inside one minute");
    assert_eq!(
        ok,
        [5, 3, SENT],
        "edge 5 a minute and mobile 3 across both agents; a domain without rules is not limited"
    );
    // Both agents leased the rule's credit from the one budget.
    let leases = json(&ctl_insecure(
        &server,
        &["lease", "ls", "--policy", &rule_policy],
    ));
    let holders: std::collections::BTreeSet<&str> = leases
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["holder_id"].as_str())
        .collect();
    assert!(!holders.is_empty(), "the rule's credit is leased: {leases}");
}

#[test]
fn an_agent_with_allocators_refuses_a_local_ratelimit_file() {
    let bin = agent_binary();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("edge.yaml");
    std::fs::write(&file, EDGE).unwrap();
    let out = Command::new(bin)
        .args([
            "--allocator",
            "127.0.0.1:1",
            "--insecure",
            "--ratelimit-config",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ratelimit_config") && err.contains("leasectl policy apply -f"),
        "{err}"
    );
}

#[test]
fn a_directory_with_a_bad_file_applies_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    let rules = dir.join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("a-edge.yaml"), EDGE).unwrap();
    std::fs::write(
        rules.join("b-mobile.yaml"),
        MOBILE.replace("minute", "minutes"),
    )
    .unwrap();
    let out = ctl_insecure(&server, &["policy", "apply", "-f", rules.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(6), "invalid input");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("b-mobile.yaml")
            && err.contains("ratelimit.descriptors[0].rate_limit.unit: invalid rate limit unit"),
        "{err}"
    );
    let listed = json(&ctl_insecure(&server, &["policy", "ls"]));
    assert_eq!(
        listed.as_array().unwrap().len(),
        0,
        "nothing applied: {listed}"
    );
    // Two files naming one domain are refused the same way.
    std::fs::write(rules.join("b-mobile.yaml"), EDGE).unwrap();
    let out = ctl_insecure(&server, &["policy", "apply", "-f", rules.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'ratelimit-edge' is in both"), "{err}");
}
