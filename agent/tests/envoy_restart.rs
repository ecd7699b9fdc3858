//! A standalone agent given a state file keeps its window counts across a restart: after
//! SIGTERM (saved as it stops) and after `kill -9` once a periodic save has run.

mod support;

use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::rls::{desc, request, Rls};
use support::{agent, away_from_the_hour, free_addr, stop, Running};

const RULE: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    \
                    rate_limit: {unit: hour, requests_per_unit: 3}\n";

fn start(config: &Path, state: &Path, grpc: &str) -> Running {
    let http = free_addr().to_string();
    let args = [
        "--standalone",
        "--ratelimit-config",
        config.to_str().unwrap(),
        "--state-file",
        state.to_str().unwrap(),
        "--grpc-addr",
        grpc,
        "--http-addr",
        &http,
    ];
    let child = agent(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Running(child)
}

async fn connect(addr: &str) -> Rls {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(c) = RateLimitServiceClient::connect(format!("http://{addr}")).await {
            return c;
        }
        assert!(Instant::now() < deadline, "the agent never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn hit(c: &mut Rls, tenant: &str) -> Code {
    let r = c
        .should_rate_limit(request("edge", vec![desc(&[("tenant", tenant)])]))
        .await
        .unwrap()
        .into_inner();
    Code::try_from(r.overall_code).unwrap()
}

#[tokio::test]
async fn window_counts_survive_a_restart_with_a_state_file() {
    away_from_the_hour(60).await;
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("edge.yaml");
    std::fs::write(&config, RULE).unwrap();
    let state = tmp.path().join("state");
    let grpc = free_addr().to_string();

    let running = start(&config, &state, &grpc);
    let mut c = connect(&grpc).await;
    for i in 0..3 {
        assert_eq!(hit(&mut c, "a").await, Code::Ok, "hit {i} of 3");
    }
    assert_eq!(hit(&mut c, "a").await, Code::OverLimit);
    assert_eq!(hit(&mut c, "b").await, Code::Ok, "b spent one");
    drop(c);
    stop(running, "-TERM").await;

    let running = start(&config, &state, &grpc);
    let mut c = connect(&grpc).await;
    assert_eq!(hit(&mut c, "a").await, Code::OverLimit, "a's window kept");
    assert_eq!(hit(&mut c, "b").await, Code::Ok, "b's second");
    assert_eq!(hit(&mut c, "b").await, Code::Ok, "b's third");
    // A periodic save (every second) carries b's count over a kill -9 as well.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    drop(c);
    stop(running, "-9").await;

    let _running = start(&config, &state, &grpc);
    let mut c = connect(&grpc).await;
    assert_eq!(hit(&mut c, "b").await, Code::OverLimit, "b's window kept");
    assert_eq!(hit(&mut c, "a").await, Code::OverLimit);
    assert_eq!(hit(&mut c, "c").await, Code::Ok, "other users count apart");
}
