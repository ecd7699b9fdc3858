//! Exact decisions in batches, on the release binaries: the allocator's DecideBatch decides
//! each request as Decide would and refuses malformed batches naming what is wrong, and two
//! agents whose concurrent requests leave in shared calls still admit exactly the limit.

mod process_support;

use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_client::LeaseServiceClient;
use process_support::{
    admit_answer, ctl_insecure, start_insecure_agent_with, start_insecure_allocator, wait_until,
    Proc,
};
use std::path::Path;
use std::time::Duration;
use tonic::Code;

const LIMIT: u64 = 10;

fn apply_fixed_window(dir: &Path, server: &str, id: &str) {
    let file = dir.join(format!("{id}.yaml"));
    let doc = format!(
        "id: {id}\ndimensions: [{{name: tenant}}]\nscope: global\nenforcement: exact\n\
         algorithm: fixed_window\nrate: {{units: {LIMIT}, per: 1h}}\n"
    );
    std::fs::write(&file, doc).unwrap();
    let out = ctl_insecure(server, &["policy", "apply", "-f", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn one_unit(holder: &str, key: &str) -> pb::DecideRequest {
    pb::DecideRequest {
        holder_id: holder.into(),
        items: vec![pb::DecideItem {
            policy_id: "fw".into(),
            key: key.into(),
            units: 1,
        }],
        decision_id: 0,
    }
}

fn batch(requests: Vec<pb::DecideRequest>) -> pb::DecideBatchRequest {
    pb::DecideBatchRequest {
        holder_id: "gw".into(),
        requests,
    }
}

async fn client(server: &str) -> LeaseServiceClient<tonic::transport::Channel> {
    LeaseServiceClient::connect(format!("http://{server}"))
        .await
        .expect("allocator reachable")
}

#[tokio::test]
async fn a_batch_decides_each_request_and_a_malformed_one_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    apply_fixed_window(dir, &server, "fw");
    let mut c = client(&server).await;

    // Twelve single units of one key and one of another: the key's ten fit, two do not,
    // and the other key's unit is decided on its own.
    let mut requests: Vec<_> = (0..12).map(|_| one_unit("", "fw:tenant=acme")).collect();
    requests.push(one_unit("gw", "fw:tenant=beta"));
    let resp = c.decide_batch(batch(requests)).await.unwrap().into_inner();
    assert_eq!(resp.outcomes.len(), 13);
    let admitted: Vec<bool> = resp
        .outcomes
        .iter()
        .map(|o| match &o.outcome {
            Some(pb::decide_batch_outcome::Outcome::Decided(d)) => d.admitted,
            other => panic!("not decided: {other:?}"),
        })
        .collect();
    let acme = admitted[..12].iter().filter(|a| **a).count() as u64;
    assert_eq!(acme, LIMIT, "{admitted:?}");
    assert!(admitted[12], "beta's unit is its own key's");

    // A single Decide after the batch sees the batch's charges.
    let single = c
        .decide(one_unit("gw", "fw:tenant=acme"))
        .await
        .unwrap()
        .into_inner();
    assert!(!single.admitted);

    // A request of another holder inside the batch.
    let mixed = batch(vec![
        one_unit("gw", "fw:tenant=c"),
        one_unit("other", "fw:tenant=c"),
    ]);
    let err = c.decide_batch(mixed).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("requests[1].holder_id"), "{err:?}");

    // Too many, and none.
    let many = batch((0..257).map(|_| one_unit("", "fw:tenant=d")).collect());
    let err = c.decide_batch(many).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("requests: 257"), "{err:?}");
    let err = c.decide_batch(batch(Vec::new())).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("requests: 0"), "{err:?}");

    // Neither refused batch charged anything: tenants c and d are untouched.
    let fresh = c
        .decide(one_unit("gw", "fw:tenant=c"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fresh.verdicts[0].remaining, LIMIT - 1, "{fresh:?}");

    // One request the ledger refuses (an unknown policy) among decided ones keeps its own
    // answer; the others are decided.
    let mut unknown = one_unit("", "nope:tenant=e");
    unknown.items[0].policy_id = "nope".into();
    let mixed = batch(vec![one_unit("", "fw:tenant=e"), unknown]);
    let resp = c.decide_batch(mixed).await.unwrap().into_inner();
    match &resp.outcomes[1].outcome {
        Some(pb::decide_batch_outcome::Outcome::Failed(f)) => {
            assert!(f.message.contains("nope"), "{f:?}")
        }
        other => panic!("unknown policy decided: {other:?}"),
    }
    assert!(matches!(
        &resp.outcomes[0].outcome,
        Some(pb::decide_batch_outcome::Outcome::Decided(d)) if d.admitted
    ));
}

fn start_agent(dir: &Path, server: &str, holder: &str) -> (Proc, u16) {
    start_insecure_agent_with(dir, server, holder, &["--decide-timeout-ms", "5000"])
}

#[test]
fn concurrent_requests_at_two_agents_admit_exactly_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_node, server) = start_insecure_allocator(dir);
    apply_fixed_window(dir, &server, "fw");
    let agents = [
        start_agent(dir, &server, "gw-a"),
        start_agent(dir, &server, "gw-b"),
    ];
    for (_, port) in &agents {
        // Until the agent has the policy its answer names the policy unknown.
        wait_until(
            Duration::from_secs(10),
            Duration::from_millis(20),
            || match admit_answer(*port, "fw", "warm") {
                Some(a) if a["reason"] != "unknownpolicy" => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
    }
    // Forty requests at once at each agent, for one tenant.
    let threads: Vec<_> = agents
        .iter()
        .flat_map(|(_, port)| {
            let port = *port;
            (0..40).map(move |_| std::thread::spawn(move || admit_answer(port, "fw", "acme")))
        })
        .collect();
    let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let allowed = answers
        .iter()
        .filter(|a| a.as_ref().is_some_and(|a| a["allowed"] == true))
        .count() as u64;
    let over = answers
        .iter()
        .filter(|a| a.as_ref().is_some_and(|a| a["reason"] == "overlimit"))
        .count() as u64;
    assert_eq!(allowed, LIMIT, "{answers:?}");
    assert_eq!(
        allowed + over,
        80,
        "every other request is refused over the limit"
    );
}
