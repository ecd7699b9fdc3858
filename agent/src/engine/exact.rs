//! Dimensions of exact policies (`enforcement: exact`): the owning allocator decides each
//! request, and the engine enforces its answer like any other dimension's.
//!
//! A request with exact dimensions is decided in two passes around one call to the
//! allocator (see [`ExactGate`](crate::exact::ExactGate)): [`Engine::exact_asks`] builds
//! the keys the allocator is asked about, without charging anything; the allocator admits
//! or refuses them all at once; [`Engine::admit_decided`] then decides the whole request
//! with those verdicts standing in for the exact dimensions' state, so kill switches,
//! emergencies, shadow mode, counters and the all-or-nothing rule apply to them as to
//! every dimension. A dimension with no verdict (the allocator did not answer in time, or
//! the caller went straight to [`Engine::admit`]) follows the policy's failure behaviour.
//! Nothing is held on the agent: there is no credit to spend while the allocator is away,
//! so `cached_lease` refuses like `fail_closed`.

use super::admit::{units_of, Ctx, Step};
use super::decision::{Decision, DenyReason, Outcome, DIMENSIONS_LIMIT};
use super::policy::{CompiledPolicy, Emergency, Enforcement};
use super::request::{AdmitRequest, Target};
use super::undo::Found;
use super::Engine;
use leasehold_common::key::KeyBuilder;
use leasehold_common::time::Nanos;
use std::sync::Arc;

/// The allocator's answer for one exact dimension.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExactVerdict {
    /// Charged at the allocator.
    Admitted { remaining: u64, reset_after_ns: u64 },
    /// Refused at the allocator (this item did not fit, or another exact item of the same
    /// request did not).
    Denied {
        remaining: u64,
        retry_after_ns: u64,
        reset_after_ns: u64,
    },
    /// No answer: the policy's failure behaviour decides.
    Unreachable,
}

/// Verdicts of a request's exact dimensions, by dimension index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExactVerdicts {
    by_index: Vec<(usize, ExactVerdict)>,
}

impl ExactVerdicts {
    pub fn set(&mut self, index: usize, verdict: ExactVerdict) {
        match self.by_index.iter_mut().find(|(i, _)| *i == index) {
            Some((_, v)) => *v = verdict,
            None => self.by_index.push((index, verdict)),
        }
    }

    pub fn get(&self, index: usize) -> Option<ExactVerdict> {
        self.by_index
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, v)| *v)
    }
}

/// One exact dimension the allocator must be asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactAsk {
    /// The dimension's index in the request.
    pub index: usize,
    pub policy_id: Arc<str>,
    pub key: String,
    pub units: u64,
}

impl Engine {
    /// The exact dimensions of `req` that need the allocator's decision, with their keys;
    /// empty (and allocation-free) when the rule set has no exact policy. Dimensions the
    /// engine answers on its own (kill switch, an operator's emergency, a cost above the
    /// limit, an invalid key) are left out.
    pub fn exact_asks(&self, req: &AdmitRequest<'_>) -> Vec<ExactAsk> {
        let rules = self.rules.load();
        if !rules.has_exact {
            return Vec::new();
        }
        let mut asks = Vec::new();
        let mut builder = KeyBuilder::new();
        for (index, dim) in req.dimensions.iter().enumerate().take(DIMENSIONS_LIMIT) {
            let Target::Policy(id) = dim.target else {
                continue;
            };
            let Some(p) = rules.policy(id) else { continue };
            if !asks_allocator(p) {
                continue;
            }
            let units = units_of(p, req);
            if units > p.capacity {
                continue;
            }
            let key = match builder.build(&p.schema, dim.entries) {
                Err(_) => continue,
                Ok(built) if built.overflow.is_some() => p.schema.overflow_key().to_string(),
                Ok(built) => built.key.to_string(),
            };
            asks.push(ExactAsk {
                index,
                policy_id: Arc::clone(&p.id),
                key,
                units,
            });
        }
        asks
    }

    /// Decides `req` with `verdicts` as the answers of its exact dimensions.
    pub fn admit_decided(
        &self,
        req: &AdmitRequest<'_>,
        now: Nanos,
        verdicts: &ExactVerdicts,
    ) -> Decision {
        let mut decision = Decision::new();
        self.admit_with(req, now, &mut decision, Some(verdicts));
        decision
    }

    /// An exact dimension's step, from its verdict.
    pub(crate) fn check_exact(
        &self,
        p: &CompiledPolicy,
        entry: Found<'_>,
        units: u64,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        match ctx.verdict() {
            Some(ExactVerdict::Admitted {
                remaining,
                reset_after_ns,
            }) => Step {
                outcome: Outcome::Admitted,
                remaining,
                reset_after_ns,
                retry_after_ns: 0,
            },
            Some(ExactVerdict::Denied {
                remaining,
                retry_after_ns,
                reset_after_ns,
            }) => Step {
                reset_after_ns,
                ..Step::deny(DenyReason::OverLimit, remaining, retry_after_ns)
            },
            // Nothing is held here to spend meanwhile.
            Some(ExactVerdict::Unreachable) | None => self.on_failure(p, entry, 0, units, ctx),
        }
    }
}

/// Whether a dimension of `p` is decided by the allocator now (rather than answered by the
/// engine alone: a kill switch, or an operator's emergency, which applies locally).
fn asks_allocator(p: &CompiledPolicy) -> bool {
    matches!(p.enforcement, Enforcement::Exact)
        && !p.policy.kill_switch
        && p.runtime.emergency.get() == Emergency::Normal
}
