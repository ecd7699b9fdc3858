//! What the shaping tests share: their policies' tenant, engines with a waiting cap, and
//! requests that accept a delay.

#![allow(dead_code)]

use leasehold_agent::engine::{
    AdmitRequest, Decision, Dimension, Engine, EngineLimits, RuleSource,
};
use leasehold_common::policy::Policy;

pub const MS: u64 = 1_000_000;
pub const ACME: &[(&str, &str)] = &[("tenant", "acme")];

pub fn policy(yaml: &str) -> Policy {
    Policy::from_yaml(yaml).expect("test policy is valid")
}

pub fn engine_with(policies: Vec<Policy>, shaped_waiting_max: usize) -> Engine {
    Engine::builder()
        .limits(EngineLimits {
            shaped_waiting_max,
            ..EngineLimits::default()
        })
        .build(RuleSource::from_policies(policies))
        .unwrap()
}

pub fn waiting<'a>(dims: &'a [Dimension<'a>]) -> AdmitRequest<'a> {
    AdmitRequest {
        accept_delay: true,
        ..AdmitRequest::new(dims)
    }
}

/// `Some(delay in ms)` when admitted, `None` when refused.
pub fn delay_ms(d: &Decision) -> Option<u64> {
    d.allowed.then_some(d.delay_ns / MS)
}
