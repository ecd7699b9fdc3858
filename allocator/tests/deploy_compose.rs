//! The compose example (`deploy/compose`) on this machine's Docker: images built from this
//! build's binaries, the hierarchy brought up, requests through both Envoy gateways limited
//! with the RateLimit headers, then the root's Raft leader killed, one gateway's agent cut off
//! the allocators, a root follower paused, the region's leader killed and a region follower
//! paused, each undone again. Admissions per tenant stay within the policy's fixed-window
//! bound throughout and resume after every fault. Skips, saying why, where Docker, Compose or
//! Envoy is missing.

mod compose_support;
mod process_support;

use compose_support::traffic::{get, longest_gap, window_violations, Sample, Traffic};
use compose_support::{base_image, build_images, docker, tools, Compose};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// deploy/compose/policies/edge.yaml: 10 requests per tenant per second, both gateways together.
const LIMIT_PER_WINDOW: u64 = 10;
const WINDOW_MS: u64 = 1_000;
const TENANTS: [&str; 2] = ["acme", "globex"];
/// Each gateway and tenant is offered a request every this often: 25 a second per tenant
/// over the two gateways, 2.5 times the limit.
const REQUEST_EVERY_MS: u64 = 80;
/// How long each fault lasts before it is undone.
const FAULT_MS: u64 = 8_000;
/// Admission must resume within this after a fault or its repair.
const RESUME_WITHIN_MS: u64 = 20_000;
/// How long the traffic is watched without a fault, before the first.
const QUIET_MS: u64 = 10_000;
const GLOBAL: [&str; 3] = ["global-1", "global-2", "global-3"];
const REGION: [&str; 3] = ["region-1", "region-2", "region-3"];
/// Prometheus' targets: every allocator, and each gateway's agent and Envoy.
const SCRAPE_TARGETS: usize = GLOBAL.len() + REGION.len() + 2 * 2;

#[test]
fn compose_hierarchy_limits_through_envoy_across_faults() {
    let tools = match tools() {
        Ok(t) => t,
        Err(why) => {
            return eprintln!("SKIPPED compose_hierarchy_limits_through_envoy_across_faults: {why}")
        }
    };
    let base = match base_image() {
        Ok(b) => b,
        Err(why) => {
            return eprintln!("SKIPPED compose_hierarchy_limits_through_envoy_across_faults: {why}")
        }
    };
    let started = Instant::now();
    let bin_dir = std::env::var_os("LEASEHOLD_BIN_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            process_support::agent_binary();
            process_support::leasectl_binary();
            Path::new(process_support::ALLOCATOR)
                .parent()
                .unwrap()
                .to_path_buf()
        });
    build_images(&base, &bin_dir, &tools.envoy, "e2e");
    eprintln!(
        "images built from {} in {:?}",
        bin_dir.display(),
        started.elapsed()
    );

    let compose = Compose::new(&tools, &format!("lh-e2e-{}", std::process::id()), "e2e");
    compose.run(&["up", "-d"]);
    assert_eq!(
        compose.wait_exit("certs", Duration::from_secs(60)),
        0,
        "certs"
    );
    assert_eq!(
        compose.wait_exit("policy", Duration::from_secs(120)),
        0,
        "policy"
    );

    let gateways: Vec<SocketAddr> = ["gw-1", "gw-2"]
        .iter()
        .map(|g| format!("{}:10000", compose.ip(g, "edge")).parse().unwrap())
        .collect();
    for (i, &gw) in gateways.iter().enumerate() {
        limited_with_headers(gw, i);
    }
    prometheus_scrapes_everything(&compose);
    eprintln!("hierarchy up and limiting after {:?}", started.elapsed());

    let traffic = Traffic::start(&gateways, &TENANTS, Duration::from_millis(REQUEST_EVERY_MS));
    std::thread::sleep(Duration::from_secs(3));
    let mut resumed = vec![quiet_gap(&traffic)];

    // The global leader dies; the region keeps leasing from the new one.
    let leader = leader_of(&compose, &GLOBAL);
    docker(&["kill", &compose.container(&leader)]);
    eprintln!("killed the global leader {leader}");
    resumed.push(resumes(
        &traffic,
        &[0, 1],
        "after the global leader was killed",
    ));
    std::thread::sleep(Duration::from_millis(FAULT_MS));
    docker(&["start", &compose.container(&leader)]);
    resumed.push(resumes(
        &traffic,
        &[0, 1],
        "after the old global leader restarted",
    ));

    // gw-1's agent loses the allocators: it spends what it holds, then refuses
    // (`cached_lease`); gw-2 goes on. Reconnected, gw-1 admits again.
    let control = format!("{}_control", compose.project);
    let gw1 = compose.container("gw-1");
    docker(&["network", "disconnect", &control, &gw1]);
    eprintln!("disconnected gw-1 from the allocators");
    resumed.push(resumes(&traffic, &[1], "on gw-2 while gw-1 is cut off"));
    std::thread::sleep(Duration::from_millis(FAULT_MS));
    docker(&["network", "connect", "--alias", "gw-1", &control, &gw1]);
    resumed.push(resumes(&traffic, &[0, 1], "after gw-1 was reconnected"));

    // A follower stops answering without closing its connections.
    resumed.extend(pause_follower(&compose, &traffic, &GLOBAL, "global"));

    // The region's leader dies: another region node leads, continuing the region's upstream
    // leases and the agents' leases from the replicated state, and the agents follow it.
    let leader = leader_of(&compose, &REGION);
    docker(&["kill", &compose.container(&leader)]);
    eprintln!("killed the region leader {leader}");
    resumed.push(resumes(
        &traffic,
        &[0, 1],
        "after the region leader was killed",
    ));
    std::thread::sleep(Duration::from_millis(FAULT_MS));
    docker(&["start", &compose.container(&leader)]);
    resumed.push(resumes(
        &traffic,
        &[0, 1],
        "after the old region leader restarted",
    ));

    resumed.extend(pause_follower(&compose, &traffic, &REGION, "region"));

    std::thread::sleep(Duration::from_secs(3));
    let samples = traffic.stop();
    report(&samples);
    eprintln!(
        "admission resumed after (slowest gateway and tenant / slowest tenant at any gateway):"
    );
    for r in &resumed {
        eprintln!("  {}: {:?} / {:?}", r.when, r.slowest, r.any_gateway);
    }
    for tenant in TENANTS {
        let violations = window_violations(
            &samples,
            tenant,
            LIMIT_PER_WINDOW,
            Duration::from_millis(WINDOW_MS),
        );
        assert!(violations.is_empty(), "{tenant}: {violations:#?}");
    }
    eprintln!("done in {:?}", started.elapsed());
}

/// Through `gw`, a burst of one tenant's requests: 200s first, then 429s saying who refused
/// them, with the RateLimit headers on both.
fn limited_with_headers(gw: SocketAddr, index: usize) {
    let (ok, refused) =
        process_support::wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
            let tenant = format!("burst-{index}");
            let answers: Vec<_> = (0..2 * LIMIT_PER_WINDOW)
                .map(|_| get(gw, &tenant))
                .collect::<Result<_, _>>()?;
            let ok = answers.iter().find(|(s, _)| *s == 200).cloned();
            let refused = answers.iter().find(|(s, _)| *s == 429).cloned();
            match (ok, refused) {
                (Some(ok), Some(refused)) => Ok((ok, refused)),
                _ => Err(format!(
                    "gateway {gw}: statuses {:?}",
                    answers.iter().map(|a| a.0).collect::<Vec<_>>()
                )),
            }
        });
    let header = |h: &[(String, String)], name: &str| {
        h.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    // Envoy writes header names in lower case. Only the presence of the remaining count is
    // checked: it is what one gateway's agent holds, not the fleet's.
    assert_eq!(
        header(&ok.1, "ratelimit-limit").as_deref(),
        Some("10"),
        "{ok:?}"
    );
    assert!(header(&ok.1, "ratelimit-remaining").is_some(), "{ok:?}");
    assert_eq!(
        header(&refused.1, "x-envoy-ratelimited").as_deref(),
        Some("true"),
        "{refused:?}"
    );
    assert_eq!(
        header(&refused.1, "ratelimit-limit").as_deref(),
        Some("10"),
        "{refused:?}"
    );
    assert!(
        header(&refused.1, "ratelimit-remaining").is_some(),
        "{refused:?}"
    );
}

/// Every scrape target of the compose Prometheus reports up.
fn prometheus_scrapes_everything(compose: &Compose) {
    process_support::wait_until(Duration::from_secs(60), Duration::from_secs(1), || {
        let body = compose.http_inside("prometheus", 9090, "/api/v1/targets?state=active")?;
        let json = body.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("{e}: {body}"))?;
        let targets = v["data"]["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let down: Vec<String> = targets
            .iter()
            .filter(|t| t["health"] != "up")
            .map(|t| {
                format!(
                    "{} {} ({})",
                    t["labels"]["job"], t["scrapeUrl"], t["lastError"]
                )
            })
            .collect();
        if targets.len() == SCRAPE_TARGETS && down.is_empty() {
            Ok(())
        } else {
            Err(format!("{} targets, not up: {down:?}", targets.len()))
        }
    });
}

/// The node of `cluster` whose metrics say it leads.
fn leader_of(compose: &Compose, cluster: &[&str]) -> String {
    process_support::wait_until(Duration::from_secs(20), Duration::from_millis(500), || {
        for node in cluster {
            let metrics = compose
                .http_inside(node, 7480, "/metrics")
                .unwrap_or_default();
            if metrics.contains("\nleasehold_raft_is_leader 1") {
                return Ok(node.to_string());
            }
        }
        Err(format!("no node of {cluster:?} reports leading"))
    })
}

/// `docker pause`s a follower of `cluster` for the fault's length, so that it stops answering
/// without closing its connections, then unpauses it; how long admission took to resume
/// after each.
fn pause_follower(
    compose: &Compose,
    traffic: &Traffic,
    cluster: &[&str],
    level: &str,
) -> [Resumed; 2] {
    let leader = leader_of(compose, cluster);
    let follower = cluster.iter().find(|n| **n != leader).unwrap();
    docker(&["pause", &compose.container(follower)]);
    eprintln!("paused the {level} follower {follower}");
    let paused = resumes(
        traffic,
        &[0, 1],
        &format!("while a {level} follower is paused"),
    );
    std::thread::sleep(Duration::from_millis(FAULT_MS));
    docker(&["unpause", &compose.container(follower)]);
    let unpaused = resumes(
        traffic,
        &[0, 1],
        &format!("after the {level} follower was unpaused"),
    );
    [paused, unpaused]
}

/// How long admission took to come back after a fault or a repair: for the slowest gateway
/// and tenant, and for the slowest tenant at whichever gateway admitted it first.
struct Resumed {
    when: String,
    slowest: Duration,
    any_gateway: Duration,
}

/// Each of `gateways` admits a request of every tenant sent from now on.
fn resumes(traffic: &Traffic, gateways: &[usize], when: &str) -> Resumed {
    let from = Instant::now();
    let mut slowest = Duration::ZERO;
    for &gw in gateways {
        for tenant in TENANTS {
            let took = traffic
                .wait_admitted(gw, tenant, from, Duration::from_millis(RESUME_WITHIN_MS))
                .unwrap_or_else(|e| panic!("{when}: {e}"));
            eprintln!(
                "  {when}: gateway {} admitted {tenant} after {took:?}",
                gw + 1
            );
            slowest = slowest.max(took);
        }
    }
    let any_gateway = TENANTS
        .iter()
        .filter_map(|t| traffic.first_admitted(gateways, t, from))
        .max()
        .unwrap_or_default();
    Resumed {
        when: when.to_string(),
        slowest,
        any_gateway,
    }
}

/// Without a fault a tenant still goes a while without an admission at a gateway (the other
/// gateway may hold the window's credit, or a lease is on its way), so a resume time shorter
/// than this gap says little about the fault. Watches the traffic for `QUIET_MS` and returns
/// the longest gaps, per gateway and over both.
fn quiet_gap(traffic: &Traffic) -> Resumed {
    let from = Instant::now();
    std::thread::sleep(Duration::from_millis(QUIET_MS));
    let samples = traffic.snapshot();
    let to = Instant::now();
    let (mut slowest, mut any_gateway) = (Duration::ZERO, Duration::ZERO);
    for tenant in TENANTS {
        for gw in 0..2 {
            let gap = longest_gap(&samples, Some(gw), tenant, from, to);
            eprintln!(
                "  no fault: gateway {} went {gap:?} without admitting {tenant}",
                gw + 1
            );
            slowest = slowest.max(gap);
        }
        any_gateway = any_gateway.max(longest_gap(&samples, None, tenant, from, to));
    }
    Resumed {
        when: format!("longest gap without a fault (over {QUIET_MS} ms)"),
        slowest,
        any_gateway,
    }
}

/// Answers per gateway, tenant and status.
fn report(samples: &[Sample]) {
    let mut counts = std::collections::BTreeMap::<(usize, &str, u16), usize>::new();
    for s in samples {
        *counts
            .entry((s.gateway + 1, s.tenant, s.status))
            .or_default() += 1;
    }
    for ((gw, tenant, status), n) in counts {
        eprintln!("  gw-{gw} {tenant} {status}: {n}");
    }
}
