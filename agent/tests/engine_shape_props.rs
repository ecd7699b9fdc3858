//! Shaping through the engine over random arrival schedules: callers that wait and callers
//! that do not, at one instant or spread out, against a random rate, burst, `max_delay` and
//! waiting cap. Every request the engine admits departs at `departs_at` (or at once); the
//! units departing in any interval `T` stay within `burst + ⌊rate·T⌋`, no delay exceeds
//! `max_delay`, and a refusal charges nothing: the engine decides exactly as the pure
//! shaped take on a token bucket does, refusals included. The same at a leased key, over
//! random grants of credit: no more is admitted than was granted, and a refusal spends
//! neither credit nor a place in the key's schedule.

use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, EngineLimits, RuleSource};
use leasehold_common::algo::{take_shaped, Shaped, TokenBucket};
use leasehold_common::policy::Policy;
use leasehold_common::rate::Rate;
use leasehold_common::time::Nanos;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
struct Arrival {
    gap_ms: u64,
    accept_delay: bool,
}

fn arrivals() -> impl Strategy<Value = Vec<Arrival>> {
    let gap = prop_oneof![3 => Just(0u64), 2 => 0u64..50, 1 => 0u64..1_000];
    let one = (gap, prop::bool::weighted(0.8)).prop_map(|(gap_ms, accept_delay)| Arrival {
        gap_ms,
        accept_delay,
    });
    prop::collection::vec(one, 1..80)
}

/// `units` per `per_ms`, `burst`, `max_delay_ms`, waiting cap.
fn config() -> impl Strategy<Value = (u64, u64, u64, u64, usize)> {
    (1u64..=10, 10u64..=2_000, 1u64..=5, 1u64..=3_000, 0usize..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_engine_departs_within_the_bound_and_refusals_charge_nothing(
        (units, per_ms, burst, max_delay_ms, waiting_max) in config(),
        arr in arrivals(),
    ) {
        let yaml = format!(
            "id: api\ndimensions: [{{name: tenant, required: true}}]\n\
             rate: {{units: {units}, per: {per_ms}ms}}\nburst: {burst}\nscope: process\n\
             shape: {{max_delay: {max_delay_ms}ms}}\n"
        );
        let engine = Engine::builder()
            .limits(EngineLimits { keys_max: 16, shards: 1, shaped_waiting_max: waiting_max, ..EngineLimits::default() })
            .build(RuleSource::from_policies(vec![Policy::from_yaml(&yaml).unwrap()]))
            .unwrap();
        let rate = Rate::new(units, per_ms * MS).unwrap();
        let max_delay_ns = max_delay_ms * MS;
        let entries = [("tenant", "acme")];
        let dims = [Dimension::policy("api", &entries)];

        // The model: the same bucket, made full at the first request as the engine's key is.
        let start = Nanos::from_secs(1);
        let mut model = TokenBucket::full(rate, burst, start);
        let mut model_waiting: Vec<Nanos> = Vec::new();

        let mut now = start;
        let mut departed: Vec<Nanos> = Vec::new();
        for a in &arr {
            now = now.saturating_add_ns(a.gap_ms * MS);
            let req = AdmitRequest { accept_delay: a.accept_delay, ..AdmitRequest::new(&dims) };
            let d = engine.admit(&req, now);

            let bound = if a.accept_delay { max_delay_ns } else { 0 };
            model_waiting.retain(|&at| at > now);
            let free = model_waiting.len() < waiting_max;
            let expected = take_shaped(&mut model, 1, now, bound, |_| free);
            match expected {
                Shaped::Admit { delay_ns, .. } => {
                    prop_assert!(d.allowed, "the engine refused what the model admits at {now:?}");
                    prop_assert_eq!(d.delay_ns, delay_ns);
                    if delay_ns > 0 {
                        model_waiting.push(now.saturating_add_ns(delay_ns));
                    }
                }
                Shaped::Deny { retry_after_ns, .. } => {
                    prop_assert!(!d.allowed, "the engine admitted what the model refuses at {now:?}");
                    prop_assert_eq!(d.retry_after_ns, retry_after_ns);
                }
            }
            if d.allowed {
                prop_assert!(d.delay_ns <= bound, "delay {} above {}", d.delay_ns, bound);
                let departure = now.saturating_add_ns(d.delay_ns);
                if d.delay_ns > 0 {
                    prop_assert_eq!(d.departs_at, departure);
                }
                departed.push(departure);
            }
            prop_assert!(engine.shaped_waiting(now) <= waiting_max);
        }
        departed.sort();
        for i in 0..departed.len() {
            for j in i..departed.len() {
                let t = departed[j].saturating_since(departed[i]);
                let units_in = (j - i + 1) as u64;
                prop_assert!(
                    units_in <= burst + rate.units_in(t),
                    "{} units depart in {} ns, bound {}", units_in, t, burst + rate.units_in(t)
                );
            }
        }
        let admitted = engine.stats().policies[0].counters.admitted;
        prop_assert_eq!(admitted, departed.len() as u64, "only admissions are charged");
    }
}

#[derive(Clone, Debug)]
enum Event {
    /// The lease manager deposits `units` more credit.
    Grant {
        gap_ms: u64,
        units: u64,
    },
    Request {
        gap_ms: u64,
        accept_delay: bool,
    },
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    let gap = || prop_oneof![3 => Just(0u64), 2 => 0u64..50, 1 => 0u64..1_000];
    let grant = (gap(), 0u64..6).prop_map(|(gap_ms, units)| Event::Grant { gap_ms, units });
    let request =
        (gap(), prop::bool::weighted(0.8)).prop_map(|(gap_ms, accept_delay)| Event::Request {
            gap_ms,
            accept_delay,
        });
    prop::collection::vec(prop_oneof![1 => grant, 5 => request], 1..100)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A leased key paces the credit it holds: the engine decides exactly as a model of
    /// "held credit covers the units, and a GCRA schedule at the policy's rate and burst
    /// has a departure within the bound" does, with the credit and the schedule left
    /// alone by every refusal.
    #[test]
    fn a_leased_key_departs_within_the_bound_on_credit_it_was_granted(
        (units, per_ms, burst, max_delay_ms, waiting_max) in config(),
        evs in events(),
    ) {
        use leasehold_agent::credit::SlotState;
        use leasehold_common::algo::Gcra;

        let yaml = format!(
            "id: api\ndimensions: [{{name: tenant, required: true}}]\n\
             rate: {{units: {units}, per: {per_ms}ms}}\nburst: {burst}\nscope: global\n\
             shape: {{max_delay: {max_delay_ms}ms}}\n"
        );
        let engine = Engine::builder()
            .limits(EngineLimits { keys_max: 16, shards: 1, shaped_waiting_max: waiting_max, ..EngineLimits::default() })
            .build(RuleSource::from_policies(vec![Policy::from_yaml(&yaml).unwrap()]))
            .unwrap();
        let rx = engine.take_acquire_queue().unwrap();
        let rate = Rate::new(units, per_ms * MS).unwrap();
        let max_delay_ns = max_delay_ms * MS;
        let entries = [("tenant", "acme")];
        let dims = [Dimension::policy("api", &entries)];

        // The first request asks for the key's lease and is refused without one.
        let start = Nanos::from_secs(1);
        prop_assert!(!engine.admit(&AdmitRequest::new(&dims), start).allowed);
        let slot = rx.try_recv().expect("an acquire was queued").slot;
        slot.deposit(0, u64::MAX / 2);
        slot.set_state(SlotState::Active);

        let mut model = Gcra::full(rate, burst, start).unwrap();
        let mut model_credit = 0u64;
        let mut model_waiting: Vec<Nanos> = Vec::new();
        let mut granted = 0u64;

        let mut now = start;
        let mut departed: Vec<Nanos> = Vec::new();
        for ev in &evs {
            let accept_delay = match *ev {
                Event::Grant { gap_ms, units } => {
                    now = now.saturating_add_ns(gap_ms * MS);
                    slot.deposit(units, u64::MAX / 2);
                    model_credit += units;
                    granted += units;
                    continue;
                }
                Event::Request { gap_ms, accept_delay } => {
                    now = now.saturating_add_ns(gap_ms * MS);
                    accept_delay
                }
            };
            let req = AdmitRequest { accept_delay, ..AdmitRequest::new(&dims) };
            let d = engine.admit(&req, now);

            let bound = if accept_delay { max_delay_ns } else { 0 };
            model_waiting.retain(|&at| at > now);
            let free = model_waiting.len() < waiting_max;
            let mut tried = model.clone();
            match take_shaped(&mut tried, 1, now, bound, |_| free) {
                Shaped::Admit { delay_ns, .. } if model_credit >= 1 => {
                    prop_assert!(d.allowed, "the engine refused what the model admits at {now:?}");
                    prop_assert_eq!(d.delay_ns, delay_ns);
                    model = tried;
                    model_credit -= 1;
                    if delay_ns > 0 {
                        model_waiting.push(now.saturating_add_ns(delay_ns));
                    }
                }
                Shaped::Admit { .. } => {
                    prop_assert!(!d.allowed, "the engine admitted beyond its credit at {now:?}");
                    prop_assert_eq!(d.retry_after_ns, rate.ns_until(1, 0));
                }
                Shaped::Deny { retry_after_ns, .. } => {
                    prop_assert!(!d.allowed, "the engine admitted what the schedule refuses at {now:?}");
                    prop_assert_eq!(d.retry_after_ns, retry_after_ns);
                }
            }
            prop_assert_eq!(slot.remaining(), model_credit, "credit after the decision at {:?}", now);
            if d.allowed {
                prop_assert!(d.delay_ns <= bound, "delay {} above {}", d.delay_ns, bound);
                let departure = now.saturating_add_ns(d.delay_ns);
                if d.delay_ns > 0 {
                    prop_assert_eq!(d.departs_at, departure);
                }
                departed.push(departure);
            }
            prop_assert!(engine.shaped_waiting(now) <= waiting_max);
        }
        departed.sort();
        for i in 0..departed.len() {
            for j in i..departed.len() {
                let t = departed[j].saturating_since(departed[i]);
                let units_in = (j - i + 1) as u64;
                prop_assert!(
                    units_in <= burst + rate.units_in(t),
                    "{} units depart in {} ns, bound {}", units_in, t, burst + rate.units_in(t)
                );
            }
        }
        let n = departed.len() as u64;
        prop_assert!(n <= granted, "{} admitted on {} granted", n, granted);
        prop_assert_eq!(granted - slot.remaining(), n, "only admissions spend credit");
        let admitted = engine.stats().policies[0].counters.admitted;
        prop_assert_eq!(admitted, n);
    }
}
