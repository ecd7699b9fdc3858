//! Wall-clock inputs: calendar quotas and policy versions that take effect later; and
//! racing threads on one leased key.

mod wall;
use wall::manual_wall;

use leasehold_agent::credit::SlotState;
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, Outcome, RuleSource};
use leasehold_common::policy::{Policy, PolicyVersion};
use leasehold_common::time::Nanos;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[test]
fn calendar_quota_resets_at_local_midnight() {
    let policy = Policy::from_yaml(
        "id: daily\ndimensions: [{name: tenant}]\nalgorithm: calendar_quota\n\
         calendar: {period: day, time_zone: Europe/Berlin, units: 2}\nscope: process\n",
    )
    .unwrap();
    // 22:30 UTC is 23:30 in Berlin in winter: midnight there is 30 minutes away.
    let (wall, clock) = manual_wall("2026-01-10T22:30:00Z");
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource::from_policies([policy]))
        .unwrap();
    let dims = [Dimension::policy("daily", &[("tenant", "a")])];
    let req = AdmitRequest::new(&dims);
    assert!(e.admit(&req, Nanos(0)).allowed);
    assert!(e.admit(&req, Nanos(1)).allowed);
    let d = e.admit(&req, Nanos(2));
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ns, 30 * 60 * 1_000_000_000);
    wall.store(wall.load(Ordering::SeqCst) + 30 * 60, Ordering::SeqCst);
    assert!(e.admit(&req, Nanos(3)).allowed, "a new day in Berlin");
}

#[test]
fn a_later_version_takes_effect_when_due() {
    let v1 = Policy::from_yaml(
        "id: api\ndimensions: [{name: tenant}]\nrate: {units: 1, per: 1h}\nburst: 1\nscope: process\n",
    )
    .unwrap();
    let mut v2 = v1.clone();
    v2.burst = Some(5);
    v2.effective_at = Some("2026-06-01T00:00:00Z".parse().unwrap());
    let (wall, clock) = manual_wall("2026-05-31T23:59:00Z");
    let version = |version, policy| PolicyVersion {
        version,
        policy,
        rolled_back_from: None,
    };
    let e = Engine::builder()
        .wall_clock(clock)
        .build(RuleSource {
            policies: vec![version(1, v1), version(2, v2)],
            envoy: None,
        })
        .unwrap();
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    let req = AdmitRequest::new(&dims);
    assert_eq!(e.admit(&req, Nanos(0)).results[0].policy_version, 1);
    assert!(!e.admit(&req, Nanos(0)).allowed, "version 1: burst 1");
    assert_eq!(
        e.next_activation(),
        Some("2026-06-01T00:00:00Z".parse().unwrap())
    );
    assert!(!e.reload_due().unwrap(), "not due yet");
    wall.store(wall.load(Ordering::SeqCst) + 60, Ordering::SeqCst);
    assert!(e.reload_due().unwrap());
    assert_eq!(e.next_activation(), None);
    let d = e.admit(&req, Nanos(0));
    assert_eq!(d.results[0].policy_version, 2);
    assert_eq!(
        d.results[0].remaining, 4,
        "version 2 starts with its own burst"
    );
}

#[test]
fn racing_threads_never_spend_more_than_the_slot_holds() {
    let policy = Policy::from_yaml(
        "id: api\ndimensions: [{name: tenant}]\nrate: {units: 10, per: 1s}\nburst: 100000\n",
    )
    .unwrap();
    let e = Arc::new(
        Engine::builder()
            .build(RuleSource::from_policies([policy]))
            .unwrap(),
    );
    let rx = e.take_acquire_queue().unwrap();
    let dims = [Dimension::policy("api", &[("tenant", "a")])];
    e.admit(&AdmitRequest::new(&dims), Nanos(0));
    let slot = rx.try_recv().unwrap().slot;
    slot.deposit(5_000, u64::MAX);
    slot.set_state(SlotState::Active);
    let admitted: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let e = Arc::clone(&e);
                s.spawn(move || {
                    let dims = [Dimension::policy("api", &[("tenant", "a")])];
                    let req = AdmitRequest {
                        hits: 3,
                        ..AdmitRequest::new(&dims)
                    };
                    (0..2_000u64)
                        .filter(|i| e.admit(&req, Nanos(*i)).allowed)
                        .count() as u64
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(
        admitted * 3 + slot.remaining(),
        5_000,
        "every unit accounted for"
    );
    assert_eq!(admitted, 5_000 / 3);
    let c = e.stats().policies[0].counters;
    assert_eq!(c.admitted, admitted * 3);
    assert_eq!(c.offered, c.admitted + c.rejected);
    let three = AdmitRequest {
        hits: 3,
        ..AdmitRequest::new(&dims)
    };
    assert_eq!(
        e.admit(&three, Nanos(9)).results[0].outcome,
        Outcome::Denied(leasehold_agent::engine::DenyReason::OverLimit)
    );
}
