//! Shaping through the engine: a request the limit would refuse now, whose units come
//! within `shape.max_delay`, is admitted with a delay, charged at its departure; the
//! waiting cap; callers that do not wait; several dimensions; the library's wait. Leased
//! keys: engine_shape_leased.rs.

mod shape_support;

use leasehold_agent::engine::{AdmitRequest, DenyReason, Dimension, Engine, Outcome, RuleSource};
use leasehold_agent::shaping::admit_and_wait;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, Nanos, SystemClock};
use shape_support::{delay_ms, engine_with, policy, waiting, ACME, MS};

/// 10 per second, burst 1, shaped up to 250 ms: one unit every 100 ms.
fn shaped(id: &str) -> Policy {
    policy(&format!(
        "id: {id}\ndimensions: [{{name: tenant, required: true}}]\n\
         rate: {{units: 10, per: 1s}}\nburst: 1\nscope: process\nshape: {{max_delay: 250ms}}\n"
    ))
}

fn plain(id: &str) -> Policy {
    policy(&format!(
        "id: {id}\ndimensions: [{{name: tenant, required: true}}]\n\
         rate: {{units: 10, per: 1s}}\nburst: 5\nscope: process\n"
    ))
}

#[test]
fn refusals_within_the_bound_become_delays() {
    let e = engine_with(vec![shaped("api")], 16);
    let dims = [Dimension::policy("api", ACME)];
    let req = waiting(&dims);
    let delays: Vec<_> = (0..4).map(|_| delay_ms(&e.admit(&req, Nanos(0)))).collect();
    assert_eq!(delays, [Some(0), Some(100), Some(200), None]);
    let refused = e.admit(&req, Nanos(0));
    assert_eq!(
        refused.results[0].outcome,
        Outcome::Denied(DenyReason::OverLimit)
    );
    // The next unit exists at 300 ms: from 50 ms on it is within 250 ms.
    assert_eq!(refused.retry_after_ns, 50 * MS);
    assert_eq!(delay_ms(&e.admit(&req, Nanos(50 * MS))), Some(250));
    let admitted = e.admit(&req, Nanos(0));
    assert!(!admitted.allowed, "the schedule is full up to 350 ms");
    let stats = e.stats();
    assert_eq!(stats.shaped_admitted, 3);
    assert_eq!(stats.shaped_waiting_full, 0);
    assert_eq!(e.shaped_waiting(Nanos(60 * MS)), 3);
    assert_eq!(e.shaped_waiting(Nanos(300 * MS)), 0, "all departed by then");
    // Units are counted as admitted when charged, delayed or not.
    let c = stats.policies[0].counters;
    assert_eq!((c.admitted, c.rejected), (4, 3));
}

#[test]
fn a_delayed_decision_says_when_it_departs() {
    let e = engine_with(vec![shaped("api")], 16);
    let dims = [Dimension::policy("api", ACME)];
    let now = Nanos(7 * MS);
    assert_eq!(e.admit(&waiting(&dims), now).departs_at, Nanos::ZERO);
    let d = e.admit(&waiting(&dims), now);
    assert_eq!(d.delay_ns, 100 * MS);
    assert_eq!(d.departs_at, Nanos(107 * MS));
    e.shaped_departed(&d);
    assert_eq!(
        e.shaped_waiting(now),
        0,
        "released before its departure time"
    );
}

#[test]
fn a_caller_that_does_not_wait_is_refused_and_charged_nothing() {
    let e = engine_with(vec![shaped("api")], 16);
    let dims = [Dimension::policy("api", ACME)];
    assert!(e.admit(&AdmitRequest::new(&dims), Nanos(0)).allowed);
    let refused = e.admit(&AdmitRequest::new(&dims), Nanos(0));
    assert!(!refused.allowed);
    assert_eq!(refused.delay_ns, 0);
    assert_eq!(refused.retry_after_ns, 100 * MS);
    // Nothing was charged: a waiting caller still gets the first delayed slot.
    assert_eq!(delay_ms(&e.admit(&waiting(&dims), Nanos(0))), Some(100));
    // That departure at 100 ms holds for callers that do not wait too: at 50 ms they
    // would have to wait, so they are refused, and at 100 ms the unit is gone.
    assert!(!e.admit(&AdmitRequest::new(&dims), Nanos(50 * MS)).allowed);
    assert!(!e.admit(&AdmitRequest::new(&dims), Nanos(100 * MS)).allowed);
    assert!(e.admit(&AdmitRequest::new(&dims), Nanos(200 * MS)).allowed);
}

#[test]
fn the_waiting_cap_refuses_as_usual_and_is_counted() {
    let e = engine_with(vec![shaped("api")], 1);
    let dims = [Dimension::policy("api", ACME)];
    let req = waiting(&dims);
    assert_eq!(delay_ms(&e.admit(&req, Nanos(0))), Some(0));
    assert_eq!(delay_ms(&e.admit(&req, Nanos(0))), Some(100));
    let full = e.admit(&req, Nanos(0));
    assert!(!full.allowed, "one request already waits");
    assert_eq!(
        full.results[0].outcome,
        Outcome::Denied(DenyReason::OverLimit)
    );
    assert_eq!(e.stats().shaped_waiting_full, 1);
    // Once the waiting one has departed its place is free, and the refusal charged
    // nothing: the next unit is still the one at 200 ms.
    assert_eq!(delay_ms(&e.admit(&req, Nanos(100 * MS))), Some(100));
    let stats = e.stats();
    assert_eq!((stats.shaped_admitted, stats.shaped_waiting_max), (2, 1));
}

#[test]
fn a_zero_cap_turns_shaping_off() {
    let e = engine_with(vec![shaped("api")], 0);
    let dims = [Dimension::policy("api", ACME)];
    assert!(e.admit(&waiting(&dims), Nanos(0)).allowed);
    assert!(!e.admit(&waiting(&dims), Nanos(0)).allowed);
    assert_eq!(e.stats().shaped_admitted, 0);
}

#[test]
fn several_dimensions_are_never_delayed() {
    let e = engine_with(vec![shaped("api"), plain("org")], 16);
    let dims = [
        Dimension::policy("org", ACME),
        Dimension::policy("api", ACME),
    ];
    assert!(e.admit(&waiting(&dims), Nanos(0)).allowed);
    let refused = e.admit(&waiting(&dims), Nanos(0));
    assert!(!refused.allowed);
    assert_eq!(refused.delay_ns, 0);
    assert_eq!(refused.results[0].outcome, Outcome::RolledBack);
    // The lone dimension is shaped, after the refusal above charged nothing on it.
    let alone = [Dimension::policy("api", ACME)];
    assert_eq!(delay_ms(&e.admit(&waiting(&alone), Nanos(0))), Some(100));
}

#[test]
fn policies_without_shape_never_delay() {
    let e = engine_with(vec![plain("org")], 16);
    let dims = [Dimension::policy("org", ACME)];
    let decisions: Vec<_> = (0..6).map(|_| e.admit(&waiting(&dims), Nanos(0))).collect();
    assert!(decisions.iter().all(|d| d.delay_ns == 0));
    assert_eq!(decisions.iter().filter(|d| d.allowed).count(), 5);
}

#[test]
fn shadow_mode_never_delays() {
    let mut p = shaped("api");
    p.mode = leasehold_common::policy::Mode::Shadow;
    let e = engine_with(vec![p], 16);
    let dims = [Dimension::policy("api", ACME)];
    let _ = e.admit(&waiting(&dims), Nanos(0));
    let d = e.admit(&waiting(&dims), Nanos(0));
    assert!(d.allowed);
    assert_eq!(d.delay_ns, 0);
    assert!(matches!(d.results[0].outcome, Outcome::ShadowDenied(_)));
}

#[tokio::test]
async fn the_library_waits_until_the_departure() {
    // 20 per second: one unit every 50 ms.
    let p = policy(
        "id: api\ndimensions: [{name: tenant, required: true}]\n\
         rate: {units: 20, per: 1s}\nburst: 1\nscope: process\nshape: {max_delay: 80ms}\n",
    );
    let e = engine_with(vec![p], 16);
    let clock = SystemClock::new();
    let dims = [Dimension::policy("api", ACME)];
    let req = AdmitRequest::new(&dims);
    let start = std::time::Instant::now();
    let first = admit_and_wait(&e, &req, &clock).await;
    assert_eq!((first.allowed, first.delay_ns), (true, 0));
    let second = admit_and_wait(&e, &req, &clock).await;
    assert!(second.allowed);
    assert!(second.delay_ns > 0 && second.delay_ns <= 80 * MS);
    let waited = start.elapsed();
    assert!(
        waited.as_nanos() >= u128::from(second.delay_ns),
        "returned after {waited:?}, before the delay of {} ns",
        second.delay_ns
    );
    assert_eq!(e.shaped_waiting(clock.now()), 0, "its place was given back");
    // Offered together, later requests wait 50 ms more each, until beyond the bound.
    let now = clock.now();
    let together = AdmitRequest {
        accept_delay: true,
        ..req
    };
    let delays: Vec<_> = (0..4)
        .map(|_| {
            let d = e.admit(&together, now);
            d.allowed.then_some(d.delay_ns)
        })
        .collect();
    assert!(delays.iter().flatten().all(|&d| d <= 80 * MS), "{delays:?}");
    assert!(delays.contains(&None), "{delays:?}");
}

fn engine_at(policies: Vec<Policy>, wall: jiff::Timestamp) -> Engine {
    Engine::builder()
        .start(Nanos::ZERO)
        .wall_clock(move || wall)
        .build(RuleSource::from_policies(policies))
        .unwrap()
}

/// A state file taken while departures are scheduled puts the key's clock back where it
/// was: the restarted agent schedules after them, never beside them.
#[test]
fn a_restart_keeps_the_departures_already_scheduled() {
    let wall = jiff::Timestamp::from_second(1_772_323_200).unwrap();
    let windowed = policy(
        "id: win\ndimensions: [{name: tenant, required: true}]\n\
         algorithm: fixed_window\nrate: {units: 2, per: 1s}\nscope: process\n\
         shape: {max_delay: 500ms}\n",
    );
    let before = engine_at(vec![shaped("api"), windowed.clone()], wall);
    let api = [Dimension::policy("api", ACME)];
    let win = [Dimension::policy("win", ACME)];
    // The bucket's next departure is at 100 ms; the window's third unit goes at 1 s, in
    // the next window, which counts it.
    let at = Nanos(800 * MS);
    assert_eq!(delay_ms(&before.admit(&waiting(&api), at)), Some(0));
    assert_eq!(delay_ms(&before.admit(&waiting(&api), at)), Some(100));
    for expected in [Some(0), Some(0), Some(200)] {
        assert_eq!(delay_ms(&before.admit(&waiting(&win), at)), expected);
    }
    let saved = before.saved_limiters(Nanos::ZERO, at);
    assert_eq!(saved.len(), 2);

    // Restarted at once, at the same UNIX instant (the new process's clock starts at 0).
    let wall_at = wall
        .checked_add(jiff::SignedDuration::from_millis(800))
        .unwrap();
    let after = engine_at(vec![shaped("api"), windowed], wall_at);
    assert_eq!(after.restore_limiters(saved, Nanos::ZERO), 2);
    assert!(!after.admit(&AdmitRequest::new(&api), Nanos::ZERO).allowed);
    assert_eq!(
        delay_ms(&after.admit(&waiting(&api), Nanos::ZERO)),
        Some(200)
    );
    // One unit of the next window is scheduled already: one more fits there, then none.
    assert_eq!(
        delay_ms(&after.admit(&waiting(&win), Nanos::ZERO)),
        Some(200)
    );
    assert_eq!(delay_ms(&after.admit(&waiting(&win), Nanos::ZERO)), None);
}

/// Threads racing on one key, each reading a shared clock that its peers move on: every
/// departure is still within the bound and no delay above `max_delay`.
#[test]
fn racing_threads_depart_within_the_bound() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let e = engine_with(vec![shaped("api")], 64);
    let clock = AtomicU64::new(1_000 * MS);
    let departures: Vec<Nanos> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let dims = [Dimension::policy("api", ACME)];
                    let mut out = Vec::new();
                    for _ in 0..300 {
                        let now = Nanos(clock.fetch_add(MS, Ordering::Relaxed));
                        let d = e.admit(&waiting(&dims), now);
                        if d.allowed {
                            assert!(d.delay_ns <= 250 * MS, "delay {}", d.delay_ns);
                            out.push(now.saturating_add_ns(d.delay_ns));
                        }
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let mut departures = departures;
    departures.sort();
    // 10 per second, burst 1: any `n` departures span at least `(n − 1) × 100 ms`.
    for pair in departures.windows(2) {
        assert!(
            pair[1].saturating_since(pair[0]) >= 100 * MS,
            "{:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    // 1 200 ms of arrivals plus up to 250 ms of delay: 12 to 15 units.
    assert!(
        (12..=15).contains(&departures.len()),
        "{}",
        departures.len()
    );
}
