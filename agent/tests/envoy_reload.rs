//! The standalone binary reloads `--ratelimit-config` while serving: a ConfigMap-style
//! symlink swap, a file added to the directory, a broken version (refused, the rules in
//! force keep serving) and SIGHUP.

mod support;

use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::rls::{desc, request, Rls};
use support::{agent, free_addr, Running};

fn rule(domain: &str, per_hour: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: tenant\n    \
         rate_limit: {{unit: hour, requests_per_unit: {per_hour}}}\n"
    )
}

/// Writes version `name` of the mounted directory and points `..data` at it, as the
/// kubelet updates a ConfigMap volume: one rename, so a reader sees one version or the other.
fn publish(dir: &Path, name: &str, text: &str) {
    let version = dir.join(name);
    std::fs::create_dir_all(&version).unwrap();
    std::fs::write(version.join("edge.yaml"), text).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(name, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    let link = dir.join("edge.yaml");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("..data/edge.yaml", &link).unwrap();
    }
}

/// The limit the agent reports for tenant `t` of `domain`, if any.
async fn limit_of(c: &mut Rls, domain: &str) -> Option<u32> {
    let r = c
        .should_rate_limit(request(domain, vec![desc(&[("tenant", "t")])]))
        .await
        .ok()?
        .into_inner();
    r.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

/// Waits up to 10 s for `domain`'s limit to read `want`.
async fn wait_for(c: &mut Rls, domain: &str, want: Option<u32>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while limit_of(c, domain).await != want {
        assert!(Instant::now() < deadline, "{domain} never became {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn connect(addr: std::net::SocketAddr) -> Rls {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(c) = RateLimitServiceClient::connect(format!("http://{addr}")).await {
            return c;
        }
        assert!(Instant::now() < deadline, "the agent never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_ratelimit_config_reloads_while_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("config");
    std::fs::create_dir(&dir).unwrap();
    publish(&dir, "..v1", &rule("edge", 3));
    let log = tmp.path().join("agent.log");
    let (grpc, http) = (free_addr().to_string(), free_addr().to_string());
    let dir_arg = dir.display().to_string();
    let args = [
        "--standalone",
        "--ratelimit-config",
        &dir_arg,
        "--grpc-addr",
        &grpc,
        "--http-addr",
        &http,
    ];
    let child = agent(&args)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let mut c = connect(grpc.parse().unwrap()).await;
    assert_eq!(limit_of(&mut c, "edge").await, Some(3));

    publish(&dir, "..v2", &rule("edge", 5));
    wait_for(&mut c, "edge", Some(5)).await;

    std::fs::write(dir.join("other.yaml"), rule("other", 7)).unwrap();
    wait_for(&mut c, "other", Some(7)).await;

    publish(
        &dir,
        "..v3",
        "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: fortnight}\n",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("ratelimit config refused")
    {
        assert!(Instant::now() < deadline, "no refusal logged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("fortnight"),
        "the log names the problem: {logged}"
    );
    assert_eq!(
        limit_of(&mut c, "edge").await,
        Some(5),
        "the old rules keep serving"
    );
    assert_eq!(limit_of(&mut c, "other").await, Some(7));

    // SIGHUP reloads at once, and the agent keeps running.
    std::fs::write(dir.join("..v3/edge.yaml"), rule("edge", 9)).unwrap();
    let pid = running.0.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for(&mut c, "edge", Some(9)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("why=\"SIGHUP\"")
    {
        assert!(Instant::now() < deadline, "no reload on SIGHUP logged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        running.0.try_wait().unwrap().is_none(),
        "SIGHUP did not end the agent"
    );
}
