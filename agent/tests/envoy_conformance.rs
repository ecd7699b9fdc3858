//! The agent answers Envoy as envoyproxy/ratelimit does, for that service's configuration
//! format: each test states one behaviour its README and integration tests document, with
//! a configuration of our own, through the gRPC API a generated Envoy client calls.

mod support;

use support::rls::{call, desc, desc_hits, start, Rls};
use tonic::Code as Status;

use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};

const CONFIG: &str = r#"
domain: conformance
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2, name: per_user }
  - key: vip
    rate_limit: { unit: minute, requests_per_unit: 5, replaces: [{ name: per_user }] }
  - key: open
    rate_limit: { unlimited: true }
  - key: banned
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: budget
    quota_mode: true
    metadata: { service_with_quota: { name: budget } }
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tenant
    descriptors:
      - key: team
        descriptors:
          - key: app
            rate_limit: { unit: day, requests_per_unit: 1 }
"#;

fn rls() -> impl std::future::Future<Output = Rls> {
    // 12:00:30 UTC: half a minute before the minute rules reset.
    start(CONFIG, "2026-03-02T12:00:30Z")
}

#[tokio::test]
async fn a_replaced_rule_is_neither_applied_nor_charged() {
    let mut c = rls().await;
    for _ in 0..4 {
        let r = call(&mut c, vec![desc(&[("user", "u1")]), desc(&[("vip", "v")])]).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert!(r.statuses[0].current_limit.is_none(), "replaced: no limit");
    }
    let alone = call(&mut c, vec![desc(&[("user", "u1")])]).await;
    assert_eq!(alone.statuses[0].limit_remaining, 1, "nothing was charged");
}

#[tokio::test]
async fn unlimited_reports_the_largest_remaining() {
    let mut c = rls().await;
    let r = call(&mut c, vec![desc(&[("open", "x")])]).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    assert!(r.statuses[0].current_limit.is_none());
}

#[tokio::test]
async fn zero_per_unit_is_over_with_the_unit_reset() {
    let mut c = rls().await;
    let r = call(&mut c, vec![desc(&[("banned", "b")])]).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let s = &r.statuses[0];
    let limit = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (0, Unit::Minute as i32)
    );
    let reset = s.duration_until_reset.as_ref().unwrap().seconds;
    assert!((25..=30).contains(&reset), "to the minute's end: {reset}");
    assert_eq!(s.limit_remaining, 0);
}

async fn check(
    c: &mut Rls,
    hits: u64,
) -> leasehold_proto::envoy::service::ratelimit::v3::RateLimitResponse {
    call(c, vec![desc_hits(&[("user", "u2")], hits)]).await
}

#[tokio::test]
async fn zero_hits_check_without_charging_and_refused_hits_count() {
    let mut c = rls().await;
    assert_eq!(check(&mut c, 0).await.statuses[0].limit_remaining, 2);
    let hit = call(&mut c, vec![desc_hits(&[("user", "u2")], 2)]).await;
    assert_eq!(hit.statuses[0].limit_remaining, 0);
    let full = check(&mut c, 0).await;
    assert_eq!(full.statuses[0].code, Code::Ok as i32, "full, not over");
    let over = call(&mut c, vec![desc_hits(&[("user", "u2")], 1)]).await;
    assert_eq!(over.statuses[0].code, Code::OverLimit as i32);
    let after = check(&mut c, 0).await;
    assert_eq!(
        after.statuses[0].code,
        Code::OverLimit as i32,
        "the refused hit counted"
    );
}

#[tokio::test]
async fn over_limit_reports_nothing_remaining() {
    let mut c = rls().await;
    call(&mut c, vec![desc(&[("user", "u3")])]).await;
    let r = call(&mut c, vec![desc_hits(&[("user", "u3")], 2)]).await;
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(
        r.statuses[0].limit_remaining, 0,
        "one was left, two were asked"
    );
    let one = call(&mut c, vec![desc(&[("user", "u3")])]).await;
    assert_eq!(one.statuses[0].code, Code::OverLimit as i32, "2 + 2 > 2");
}

#[tokio::test]
async fn quota_rules_refuse_only_when_all_of_them_are_over() {
    let mut c = rls().await;
    let b1 = || desc(&[("budget", "b1")]);
    let b2 = || desc(&[("budget", "b2")]);
    assert_eq!(call(&mut c, vec![b1()]).await.overall_code, Code::Ok as i32);
    let r = call(&mut c, vec![b1(), b2(), desc(&[("user", "u4")])]).await;
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32, "b1 is spent");
    assert_eq!(
        r.overall_code,
        Code::Ok as i32,
        "b2 was not: one quota is enough"
    );
    let r = call(&mut c, vec![b1(), b2(), desc(&[("user", "u4")])]).await;
    assert_eq!(r.statuses[2].code, Code::Ok as i32);
    assert_eq!(
        r.overall_code,
        Code::OverLimit as i32,
        "every quota is over"
    );
}

#[tokio::test]
async fn values_are_counted_as_given() {
    let mut c = rls().await;
    let path = format!("/{}", "a".repeat(191));
    let v80 = |c: char| c.to_string().repeat(80);
    let (t, m, a) = (v80('t'), v80('m'), v80('a'));
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![("path", &path)],
        vec![("tenant", &t), ("team", &m), ("app", &a)],
        vec![("path", "")],
        vec![("path", "a\tb")],
        vec![("path", " x")],
        vec![("path", "x ")],
        vec![("path", "x")],
    ];
    for entries in &cases {
        let first = call(&mut c, vec![desc(entries)]).await;
        assert_eq!(first.overall_code, Code::Ok as i32, "{entries:?} counted");
        let second = call(&mut c, vec![desc(entries)]).await;
        assert_eq!(
            second.overall_code,
            Code::OverLimit as i32,
            "{entries:?} counted once"
        );
    }
}

#[tokio::test]
async fn many_descriptors_and_entries_are_answered() {
    let mut c = rls().await;
    let many: Vec<_> = (0..100)
        .map(|i| desc(&[("other", &i.to_string())]))
        .collect();
    assert_eq!(call(&mut c, many).await.statuses.len(), 100);
    let deep: Vec<(String, String)> = (0..20).map(|i| (format!("k{i}"), "v".into())).collect();
    let deep: Vec<(&str, &str)> = deep.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = call(&mut c, vec![desc(&deep)]).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
}

#[tokio::test]
async fn an_empty_domain_or_descriptor_list_is_an_error() {
    let mut c = rls().await;
    let no_domain = support::rls::request("", vec![desc(&[("user", "u")])]);
    let err = c.should_rate_limit(no_domain).await.unwrap_err();
    assert_eq!(err.code(), Status::Unknown);
    assert!(err.message().contains("domain"), "{}", err.message());
    let none = support::rls::request("conformance", Vec::new());
    let err = c.should_rate_limit(none).await.unwrap_err();
    assert_eq!(err.code(), Status::Unknown);
    assert!(err.message().contains("descriptor"), "{}", err.message());
}

#[tokio::test]
async fn headers_use_the_draft_03_names() {
    let mut c = rls().await;
    let r = call(
        &mut c,
        vec![desc(&[("user", "u5")]), desc(&[("open", "x")])],
    )
    .await;
    let header = |name: &str| {
        r.response_headers_to_add
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.clone())
    };
    assert_eq!(header("RateLimit-Limit").as_deref(), Some("2"));
    assert_eq!(header("RateLimit-Remaining").as_deref(), Some("1"));
    let reset: u64 = header("RateLimit-Reset").unwrap().parse().unwrap();
    assert!((25..=30).contains(&reset), "{reset}");
}
