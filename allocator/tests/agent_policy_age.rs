//! The agent binary says how current its allocator's policies are: while the allocator
//! answers, the watch stream confirms them at every heartbeat; once it is gone the
//! confirmation stops and the age passes `--policy-stale-after-ms`, which is what the
//! `LeaseholdAgentPolicyStale` alert fires on.

mod process_support;

use process_support::{start_insecure_agent_with, start_insecure_allocator, wait_until};
use std::io::{Read, Write};
use std::time::{Duration, SystemTime};

const STALE_AFTER_MS: u64 = 10_000;
/// The allocator's watch heartbeat, plus room for a slow scrape on a loaded machine.
const HEALTHY_AGE_MAX_MS: u64 = 7_000;

fn metric(port: u16, name: &str) -> f64 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let line = text
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn age_ms(port: u16) -> u64 {
    let confirmed = metric(port, "leasehold_agent_policy_confirmed_timestamp_seconds");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    ((now - confirmed) * 1_000.0).max(0.0) as u64
}

#[test]
fn policy_age_grows_past_its_bound_only_once_the_allocator_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, server) = start_insecure_allocator(dir.path());
    let stale = STALE_AFTER_MS.to_string();
    let (_agent, port) = start_insecure_agent_with(
        dir.path(),
        &server,
        "gw-1",
        &["--policy-stale-after-ms", &stale],
    );
    assert_eq!(
        metric(port, "leasehold_agent_policy_stale_after_seconds"),
        10.0
    );
    // Healthy for longer than a heartbeat: the age keeps being reset.
    for _ in 0..8 {
        let age = age_ms(port);
        assert!(
            age <= HEALTHY_AGE_MAX_MS,
            "age {age} ms with the allocator up"
        );
        std::thread::sleep(Duration::from_millis(1_000));
    }

    node.0.kill().unwrap();
    node.0.wait().unwrap();
    let confirmed = metric(port, "leasehold_agent_policy_confirmed_timestamp_seconds");
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(250),
        || match age_ms(port) {
            age if age > STALE_AFTER_MS => Ok(()),
            age => Err(format!("age {age} ms, not yet stale")),
        },
    );
    assert_eq!(
        metric(port, "leasehold_agent_policy_confirmed_timestamp_seconds"),
        confirmed,
        "nothing confirmed the policies with the allocator gone"
    );
}
