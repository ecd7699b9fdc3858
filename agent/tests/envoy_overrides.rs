//! A descriptor's `limit` (Envoy's `RateLimitOverride`) is answered as envoyproxy/ratelimit
//! answers it: in a loaded domain it is the descriptor's limit whatever rule the entries
//! match (or none), unnamed, replacing and replaced by nothing; in an unknown domain nothing
//! limits the descriptor.

mod support;

use leasehold_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use leasehold_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use leasehold_proto::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use support::rls::{call, desc, start, Rls};

const CONFIG: &str = r#"
domain: conformance
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2, name: per_user }
  - key: vip
    rate_limit: { unit: minute, requests_per_unit: 5, replaces: [{ name: per_user }] }
"#;

fn rls() -> impl std::future::Future<Output = Rls> {
    // Wednesday 2026-03-04 12:00:30 UTC.
    start(CONFIG, "2026-03-04T12:00:30Z")
}

fn limited(entries: &[(&str, &str)], requests_per_unit: u32, unit: i32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..desc(entries)
    }
}

#[tokio::test]
async fn the_override_is_the_limit_of_a_matched_rule() {
    let mut c = rls().await;
    let three = || limited(&[("user", "u1")], 3, Unit::Minute as i32);
    for left in [2, 1, 0] {
        let r = call(&mut c, vec![three()]).await;
        let s = &r.statuses[0];
        assert_eq!(s.code, Code::Ok as i32);
        assert_eq!(s.limit_remaining, left);
        let limit = s.current_limit.as_ref().expect("the override is reported");
        assert_eq!(
            (limit.requests_per_unit, limit.unit, limit.name.as_str()),
            (3, Unit::Minute as i32, "")
        );
        let reset = s.duration_until_reset.as_ref().unwrap().seconds;
        assert!((25..=30).contains(&reset), "to the minute's end: {reset}");
    }
    let over = call(&mut c, vec![three()]).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(over.statuses[0].limit_remaining, 0);
}

#[tokio::test]
async fn an_override_limits_entries_no_rule_matches_each_value_apart() {
    let mut c = rls().await;
    let other = |v: &str| limited(&[("client", v), ("route", "/pay")], 1, Unit::Hour as i32);
    assert_eq!(
        call(&mut c, vec![other("a")]).await.overall_code,
        Code::Ok as i32
    );
    let again = call(&mut c, vec![other("a")]).await;
    assert_eq!(again.overall_code, Code::OverLimit as i32);
    let reset = again.statuses[0]
        .duration_until_reset
        .as_ref()
        .unwrap()
        .seconds;
    assert!(
        (3_500..=3_570).contains(&reset),
        "to the hour's end: {reset}"
    );
    assert_eq!(
        call(&mut c, vec![other("b")]).await.overall_code,
        Code::Ok as i32,
        "another value counts apart"
    );
}

#[tokio::test]
async fn an_override_is_not_replaced_and_replaces_nothing() {
    let mut c = rls().await;
    let user = || limited(&[("user", "u2")], 1, Unit::Minute as i32);
    let vip = || desc(&[("vip", "v")]);
    let first = call(&mut c, vec![user(), vip()]).await;
    assert!(
        first.statuses[0].current_limit.is_some(),
        "the vip rule does not replace an override"
    );
    let second = call(&mut c, vec![user(), vip()]).await;
    assert_eq!(second.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(second.overall_code, Code::OverLimit as i32);
}

#[tokio::test]
async fn a_zero_override_is_over_and_a_week_resets_on_the_epoch_week() {
    let mut c = rls().await;
    let zero = call(
        &mut c,
        vec![limited(&[("user", "u3")], 0, Unit::Second as i32)],
    )
    .await;
    assert_eq!(zero.overall_code, Code::OverLimit as i32);
    assert_eq!(zero.statuses[0].limit_remaining, 0);
    let week = call(
        &mut c,
        vec![limited(&[("user", "u3")], 9, Unit::Week as i32)],
    )
    .await;
    let s = &week.statuses[0];
    assert_eq!(s.limit_remaining, 8);
    // UNIX weeks start on Thursdays 00:00 UTC: from Wednesday 12:00:30, 11:59:30 remain.
    let reset = s.duration_until_reset.as_ref().unwrap().seconds;
    assert!((43_165..=43_170).contains(&reset), "{reset}");
}

#[tokio::test]
async fn in_an_unknown_domain_nothing_limits_an_override() {
    let mut c = rls().await;
    for _ in 0..3 {
        let req = support::rls::request(
            "unknown",
            vec![limited(&[("user", "u4")], 1, Unit::Minute as i32)],
        );
        let r = c.should_rate_limit(req).await.unwrap().into_inner();
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert!(r.statuses[0].current_limit.is_none());
    }
}

#[tokio::test]
async fn an_override_without_a_unit_is_an_error_that_names_it() {
    let mut c = rls().await;
    let req = support::rls::request(
        "conformance",
        vec![desc(&[("user", "u5")]), limited(&[("user", "u5")], 5, 0)],
    );
    let err = c.should_rate_limit(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("descriptor 1") && err.message().contains("unit 0"),
        "{}",
        err.message()
    );
    let untouched = call(&mut c, vec![desc(&[("user", "u5")])]).await;
    assert_eq!(
        untouched.statuses[0].limit_remaining, 1,
        "a failed request charges nothing"
    );
}
