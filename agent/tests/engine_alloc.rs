//! P5: refusing allocates nothing, and neither does admitting on a key that has state.
//!
//! A counting global allocator counts this thread's allocations around each decision.

use leasehold_agent::credit::SlotState;
use leasehold_agent::engine::{
    AdmitRequest, Decision, Dimension, Engine, RuleSource, SelfProtection,
};
use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::policy::Policy;
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(e: &Engine, req: &AdmitRequest<'_>, now: u64) -> (Decision, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let d = e.admit(req, Nanos(now));
    let after = ALLOCATIONS.with(Cell::get);
    (d, after - before)
}

const ENVOY: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
"#;

fn engine(protection: Option<SelfProtection>) -> Engine {
    let yaml = |id: &str, extra: &str| {
        Policy::from_yaml(&format!(
            "id: {id}\ndimensions: [{{name: user, required: true, overflow: true, max_len: 16}}]\n\
             rate: {{units: 2, per: 1h}}\n{extra}"
        ))
        .unwrap()
    };
    let mut builder = Engine::builder();
    if let Some(p) = protection {
        builder = builder.self_protection(p);
    }
    builder
        .build(RuleSource {
            envoy: Some(EnvoyConfig::from_yaml("edge.yaml", ENVOY).unwrap()),
            ..RuleSource::from_policies([
                yaml("leased", "burst: 2\n"),
                yaml("local", "burst: 2\nscope: process\n"),
                yaml("window", "algorithm: sliding_window\nscope: process\n"),
                yaml("shadow", "burst: 2\nscope: process\nmode: shadow\n"),
                Policy::from_yaml(
                    "id: strict\ndimensions: [{name: user, required: true}]\nrate: {units: 1, per: 1s}\n",
                )
                .unwrap(),
            ])
        })
        .unwrap()
}

/// Creates the leased key and grants it `credit`.
fn lease(e: &Engine, dims: &[Dimension<'_>], credit: u64) {
    let rx = e.take_acquire_queue().unwrap();
    e.admit(&AdmitRequest::new(dims), Nanos(0));
    let req = rx.try_recv().unwrap();
    req.slot.deposit(credit, u64::MAX);
    req.slot.set_state(SlotState::Active);
}

#[test]
fn existing_keys_and_every_refusal_allocate_nothing() {
    let e = engine(None);
    let leased = [Dimension::policy("leased", &[("user", "alice")])];
    lease(&e, &leased, 2);
    let three = [
        Dimension::policy("leased", &[("user", "alice")]),
        Dimension::policy("local", &[("user", "alice")]),
        Dimension::policy("window", &[("user", "alice")]),
    ];
    // Warm-up: creates the local keys and grows the thread's key buffer.
    let warm = e.admit(&AdmitRequest::new(&three), Nanos(0));
    assert!(warm.allowed);

    let (d, n) = allocations(&e, &AdmitRequest::new(&leased), 1);
    assert!(d.allowed);
    assert_eq!(n, 0, "admit on an existing leased key");
    let (d, n) = allocations(&e, &AdmitRequest::new(&leased), 1);
    assert!(!d.allowed, "credit spent");
    assert_eq!(n, 0, "deny on a leased key");
    let rollback = [three[2], three[0]];
    let (d, n) = allocations(&e, &AdmitRequest::new(&rollback), 1);
    assert!(!d.allowed);
    assert_eq!(
        d.results[0].outcome,
        leasehold_agent::engine::Outcome::RolledBack
    );
    assert_eq!(n, 0, "refusal with rollback");
    let (d, n) = allocations(&e, &AdmitRequest::new(&three[1..]), 1);
    assert!(d.allowed, "the rolled-back window kept its unit");
    assert_eq!(n, 0, "2-dimension admit on existing local keys");

    let invalid = [Dimension::policy("strict", &[])];
    let (d, n) = allocations(&e, &AdmitRequest::new(&invalid), 1);
    assert!(!d.allowed);
    assert_eq!(n, 0, "invalid key");

    let overflow = [Dimension::policy(
        "local",
        &[("user", "much-too-long-for-the-limit")],
    )];
    e.admit(&AdmitRequest::new(&overflow), Nanos(1));
    e.admit(&AdmitRequest::new(&overflow), Nanos(1));
    let (d, n) = allocations(&e, &AdmitRequest::new(&overflow), 1);
    assert!(!d.allowed);
    assert_eq!(n, 0, "deny on the overflow key");

    let shadow = [Dimension::policy("shadow", &[("user", "alice")])];
    for _ in 0..2 {
        e.admit(&AdmitRequest::new(&shadow), Nanos(1));
    }
    let (d, n) = allocations(&e, &AdmitRequest::new(&shadow), 1);
    assert!(d.allowed);
    assert_eq!(n, 0, "shadow would-deny");
}

#[test]
fn envoy_descriptors_allocate_nothing_on_existing_keys() {
    let e = engine(None);
    let addr = [Dimension::envoy("edge", &[("remote_address", "10.0.0.1")])];
    assert!(e.admit(&AdmitRequest::new(&addr), Nanos(0)).allowed);
    let (d, n) = allocations(&e, &AdmitRequest::new(&addr), 0);
    assert!(!d.allowed);
    assert_eq!(n, 0, "envoy over limit");
    let blocked = [Dimension::envoy("edge", &[("blocked", "x")])];
    let (d, n) = allocations(&e, &AdmitRequest::new(&blocked), 0);
    assert!(!d.allowed);
    assert_eq!(n, 0, "envoy zero limit");
    let none = [Dimension::envoy("edge", &[("other", "x")])];
    let (d, n) = allocations(&e, &AdmitRequest::new(&none), 0);
    assert!(d.allowed);
    assert_eq!(n, 0, "no rule");
}

#[test]
fn self_protection_and_too_many_dimensions_allocate_nothing() {
    let e = engine(Some(SelfProtection {
        rate: Rate::per_second(1).unwrap(),
        burst: 1,
    }));
    let dims = [Dimension::policy("local", &[("user", "bob")])];
    assert!(e.admit(&AdmitRequest::new(&dims), Nanos(0)).allowed);
    let (d, n) = allocations(&e, &AdmitRequest::new(&dims), 0);
    assert!(!d.allowed);
    assert_eq!(n, 0, "self-protection");
    let many = [dims[0]; 9];
    let (d, n) = allocations(&e, &AdmitRequest::new(&many), 0);
    assert!(!d.allowed);
    assert_eq!(n, 0, "too many dimensions");
}
