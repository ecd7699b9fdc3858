//! One admission: resolve every dimension, charge in order, undo on refusal.

use super::config::UnknownPolicy;
use super::decision::{Decision, Denial, DenyReason, Outcome, DIMENSIONS_LIMIT};
use super::exact::{ExactVerdict, ExactVerdicts};
use super::policy::CompiledPolicy;
use super::request::{AdmitRequest, Dimension};
use super::resolve::{resolve, Plan, Resolved};
use super::results::Parts;
use super::rules::RuleSet;
use super::stats::Count;
use super::stripes::Slot;
use super::tcache::{self, Scratch};
use super::undo::{Charge, ChargeKind, Charges, EntryRef, Found};
use super::Engine;
use leasehold_common::time::Nanos;
use std::sync::atomic::Ordering;

/// The answer of one dimension's check.
pub(crate) struct Step {
    pub(crate) outcome: Outcome,
    pub(crate) remaining: u64,
    pub(crate) reset_after_ns: u64,
    pub(crate) retry_after_ns: u64,
}

impl Step {
    pub(crate) fn pass(outcome: Outcome) -> Step {
        Step {
            outcome,
            remaining: 0,
            reset_after_ns: 0,
            retry_after_ns: 0,
        }
    }

    pub(crate) fn deny(reason: DenyReason, remaining: u64, retry_after_ns: u64) -> Step {
        Step {
            outcome: Outcome::Denied(reason),
            remaining,
            reset_after_ns: retry_after_ns,
            retry_after_ns,
        }
    }
}

/// When a request is decided: monotonic time, the thread's counter slot, and the
/// allocator's verdicts for exact dimensions if it was asked.
type At<'v> = (Nanos, Slot, Option<&'v ExactVerdicts>);

/// Per-request context shared by the dimension checks.
pub(crate) struct Ctx<'e> {
    pub(crate) now: Nanos,
    pub(crate) priority: u8,
    /// [`AdmitRequest::source`]: who asks, for sharing out first leases.
    pub(crate) source: u32,
    /// Whether charges must be kept for undoing: only when another dimension may refuse
    /// after this one has charged (a lone dimension that charged has admitted).
    pub(crate) keep: bool,
    /// The dimension being checked.
    index: usize,
    /// What the dimensions charged, if it must be undone on a later refusal or held
    /// until the request ends (concurrency).
    charges: Charges,
    wall: Option<jiff::Timestamp>,
    clock: &'e super::WallClock,
    unix_offset: &'e super::epoch::UnixOffset,
    /// The allocator's verdicts for exact dimensions, when it was asked.
    exact: Option<&'e ExactVerdicts>,
    /// Whether a shaping policy may admit this request with a delay: the caller waits it
    /// out, and the request has one dimension (see `decide_many`).
    pub(crate) accept_delay: bool,
    /// The delay a shaping policy admitted the request with; 0: go now.
    pub(crate) delay_ns: u64,
}

impl Ctx<'_> {
    /// Wall time, read at most once per request and only when a calendar quota needs it.
    pub(crate) fn wall(&mut self) -> jiff::Timestamp {
        *self.wall.get_or_insert_with(|| (self.clock)())
    }

    /// UNIX time at monotonic zero, read only by windows.
    pub(crate) fn unix_offset_ns(&self) -> u64 {
        self.unix_offset.get()
    }

    /// The allocator's verdict for the dimension being checked, if it gave one.
    pub(crate) fn verdict(&self) -> Option<ExactVerdict> {
        self.exact?.get(self.index)
    }

    /// Starts dimension `index`'s check, which must keep its charges if `keep`.
    #[inline(always)]
    fn begin(&mut self, index: usize, keep: bool) {
        self.index = index;
        self.keep = keep;
    }

    /// Records what the dimension being checked charged to `entry`.
    #[inline(always)]
    pub(crate) fn charged(&mut self, kind: ChargeKind, entry: Found<'_>, units: u64) {
        let (at, wall) = (self.now, self.wall.unwrap_or(jiff::Timestamp::UNIX_EPOCH));
        let entry = EntryRef::to(entry);
        self.charges.keep(self.index, kind, entry, units, at, wall);
    }
}

/// Units a dimension costs: decided by the policy, times Envoy's hits (0 hits: a check
/// that charges nothing).
#[inline(always)]
pub(crate) fn units_of(p: &CompiledPolicy, req: &AdmitRequest<'_>) -> u64 {
    match p.request_cost {
        // The common case, without the cost's kind to look at or a product to check.
        Some(cost) if req.hits == 1 => cost,
        _ => p
            .policy
            .cost
            .of(req.route, req.bytes)
            .saturating_mul(req.hits),
    }
}

impl Engine {
    /// Decides `req` at monotonic time `now`. Every dimension admits or nothing is charged.
    /// Allocates nothing on refusal nor for keys that already have state.
    ///
    /// The decision (about 700 bytes) is returned by value, and moving it out adds a
    /// sizeable part of the check's own time: a caller deciding in a loop keeps one and
    /// uses [`admit_into`](Self::admit_into).
    #[inline]
    pub fn admit(&self, req: &AdmitRequest<'_>, now: Nanos) -> Decision {
        let mut decision = Decision::new();
        self.admit_into(req, now, &mut decision);
        decision
    }

    /// [`admit`](Self::admit) into a decision the caller keeps, reset first (releasing any
    /// concurrency units it still held). A caller deciding in a loop saves copying a whole
    /// decision out on every call.
    pub fn admit_into(&self, req: &AdmitRequest<'_>, now: Nanos, decision: &mut Decision) {
        self.admit_with(req, now, decision, None);
    }

    /// [`admit_into`](Self::admit_into) with the allocator's verdicts for exact dimensions.
    #[inline]
    pub(crate) fn admit_with(
        &self,
        req: &AdmitRequest<'_>,
        now: Nanos,
        decision: &mut Decision,
        exact: Option<&ExactVerdicts>,
    ) {
        decision.reset();
        let slot = Slot::current();
        let (number, now) = self.counters.start_decision(now, slot);
        decision.decision_id = self.decision_id(number);
        self.decide(req, (now, slot, exact), decision);
    }

    /// Decides at `now`, already through the thread's clock guard.
    #[inline]
    fn decide(&self, req: &AdmitRequest<'_>, at: At<'_>, decision: &mut Decision) {
        let now = at.0;
        if req.dimensions.len() > self.limits.dimensions_max {
            self.counters.bump(Count::TooManyDimensions);
            return refuse(decision, DenyReason::TooManyDimensions, u64::MAX);
        }
        if let Some(protector) = &self.protector {
            if let Err(retry_after_ns) = protector.try_take(now) {
                self.counters.bump(Count::SelfProtectionDenied);
                return refuse(decision, DenyReason::SelfProtection, retry_after_ns);
            }
        }
        let stamp = self.rules_stamp.load(Ordering::Acquire);
        tcache::with(|cache| {
            let (rules, scratch) = cache.rules(self.uid, stamp, || self.rules.load_full());
            match req.dimensions {
                [dim] => self.decide_one(rules, req, dim, at, decision, scratch),
                _ => self.decide_many(rules, req, at, decision, scratch),
            }
        });
    }

    /// Several dimensions: each is charged in order, and undone if a later one refuses.
    fn decide_many(
        &self,
        rules: &RuleSet,
        req: &AdmitRequest<'_>,
        (now, slot, exact): At<'_>,
        decision: &mut Decision,
        mut scratch: Scratch<'_>,
    ) {
        // Charges kept below refer to entries the key cache keeps until the request ends.
        scratch.entries.hold_displaced();
        let mut plan = Plan::new();
        plan.fill(rules, req.dimensions, scratch.hints);

        let mut ctx = self.ctx(req, now, exact);
        // A request departs once, so every dimension would have to be charged at one
        // common departure time; each is charged as it is checked, so none may wait.
        ctx.accept_delay = false;
        let mut units = [0u64; DIMENSIONS_LIMIT];
        let last = req.dimensions.len().saturating_sub(1);
        for (i, dim) in req.dimensions.iter().enumerate() {
            let policy = plan.policy(i);
            // No dimension checked after the last can refuse: its charge stands.
            ctx.begin(i, i < last);
            let cost = policy.map_or(0, |p| units_of(p, req));
            units[i] = cost;
            let step = if decision.denial.is_some() {
                Step::pass(Outcome::Skipped)
            } else if let Some(p) = plan.applied(i) {
                self.check_applied(p, dim, cost, &mut ctx, scratch.reborrow())
            } else {
                self.check_other(plan.get(i))
            };
            note_refusal(decision, i, &step);
            push_result(decision, policy, &step);
        }

        let refused = decision.denial.is_some();
        decision.allowed = !refused;
        for (i, &units) in units.iter().enumerate().take(req.dimensions.len()) {
            if let Some(charge) = ctx.charges.take(i) {
                self.settle(charge, refused, i, decision);
            }
            if let Some(p) = plan.policy(i) {
                p.runtime
                    .counters
                    .record(decision.results[i].outcome, units, slot);
            }
        }
    }

    /// A kept charge once the request is decided: undone if it was refused, held in the
    /// decision if it is a concurrency unit, else let go.
    fn settle(&self, charge: Charge, refused: bool, index: usize, d: &mut Decision) {
        if refused {
            self.undo(charge);
            d.results.set_outcome(index, Outcome::RolledBack);
        } else if let ChargeKind::InFlight = charge.kind {
            d.in_flight.push(charge.entry.into_arc(), charge.units);
        }
    }

    /// One dimension, the common case: nothing to roll back, so no charge is kept and no
    /// per-dimension bookkeeping is built.
    #[inline]
    fn decide_one(
        &self,
        rules: &RuleSet,
        req: &AdmitRequest<'_>,
        dim: &Dimension<'_>,
        (now, slot, exact): At<'_>,
        decision: &mut Decision,
        scratch: Scratch<'_>,
    ) {
        let (res, _) = resolve(rules, dim, scratch.hints);
        // Dimension 0, keeping no charge to undo: as the context starts.
        let mut ctx = self.ctx(req, now, exact);
        let units = res.policy().map_or(0, |p| units_of(p, req));
        let step = self.check(res, dim, units, &mut ctx, scratch);
        note_refusal(decision, 0, &step);
        decision.allowed = decision.denial.is_none();
        if ctx.delay_ns > 0 {
            decision.delay_ns = ctx.delay_ns;
            decision.departs_at = now.saturating_add_ns(ctx.delay_ns);
        }
        push_result(decision, res.policy(), &step);
        // Only concurrency units are kept for a lone dimension.
        if !ctx.charges.is_empty() {
            if let Some(Charge { entry, units, .. }) = ctx.charges.take(0) {
                decision.in_flight.push(entry.into_arc(), units);
            }
        }
        if let Some(p) = res.policy() {
            p.runtime.counters.record(step.outcome, units, slot);
        }
    }

    /// The context of one request's dimension checks.
    #[inline]
    fn ctx<'e>(
        &'e self,
        req: &AdmitRequest<'_>,
        now: Nanos,
        exact: Option<&'e ExactVerdicts>,
    ) -> Ctx<'e> {
        Ctx {
            exact,
            now,
            priority: req.priority,
            source: req.source,
            keep: false,
            index: 0,
            charges: Charges::new(),
            wall: None,
            clock: &self.wall_clock,
            unix_offset: &self.unix_offset,
            accept_delay: req.accept_delay,
            delay_ns: 0,
        }
    }

    /// The id of decision number `n`: the instance id, then the number's low bits.
    #[inline]
    fn decision_id(&self, n: u64) -> u64 {
        let counter_bits = 64 - super::config::INSTANCE_BITS;
        (u64::from(self.instance_id) << counter_bits) | (n & ((1u64 << counter_bits) - 1))
    }

    /// Inline: returned from a call, the step is read back in pieces other than those
    /// it was written in, and the read waits.
    #[inline(always)]
    fn check(
        &self,
        res: Resolved<'_>,
        dim: &Dimension<'_>,
        units: u64,
        ctx: &mut Ctx<'_>,
        scratch: Scratch<'_>,
    ) -> Step {
        // The common case first: a full match is a jump through a table, whose load of
        // the resolution's tag just stored waits for it.
        if let Resolved::Policy(p) = res {
            return self.check_applied(p, dim, units, ctx, scratch);
        }
        self.check_other(res)
    }

    /// A dimension resolved to policy `p`, applied.
    #[inline(always)]
    fn check_applied(
        &self,
        p: &CompiledPolicy,
        dim: &Dimension<'_>,
        units: u64,
        ctx: &mut Ctx<'_>,
        scratch: Scratch<'_>,
    ) -> Step {
        let mut step = self.check_policy(p, dim.entries, units, ctx, scratch);
        if p.shadow {
            shadow(&mut step);
        }
        step
    }

    /// A dimension resolved to anything but a policy to apply.
    #[inline(always)]
    fn check_other(&self, res: Resolved<'_>) -> Step {
        match res {
            Resolved::NoRule => Step::pass(Outcome::NoRule),
            Resolved::UnknownPolicy => {
                self.counters.bump(Count::UnknownPolicy);
                match self.unknown_policy {
                    UnknownPolicy::Allow => Step::pass(Outcome::NoRule),
                    // Nothing to wait for: the id is unknown until the rules change.
                    UnknownPolicy::Deny => Step::deny(DenyReason::UnknownPolicy, 0, u64::MAX),
                }
            }
            Resolved::Unlimited => Step::pass(Outcome::Unlimited),
            Resolved::Replaced(_) => Step::pass(Outcome::Replaced),
            Resolved::ZeroLimit { shadow } => {
                self.counters.bump(Count::ZeroLimitDenied);
                let step = Step::deny(DenyReason::ZeroLimit, 0, u64::MAX);
                if shadow {
                    Step::pass(Outcome::ShadowDenied(DenyReason::ZeroLimit))
                } else {
                    step
                }
            }
            Resolved::Policy(_) => unreachable!("checked by `check` first"),
        }
    }

    fn undo(&self, charge: Charge) {
        use super::table::EntryState;
        let Charge {
            kind,
            entry,
            units,
            at,
            wall,
        } = charge;
        let entry = entry.get();
        match kind {
            ChargeKind::Slot(ticket) => {
                if let EntryState::Leased { slot, pacer, .. } = &entry.state {
                    // Refused once the lease closed: the units then count as spent.
                    slot.refund(units, ticket);
                    if let Some(pacer) = pacer {
                        // A kept charge never waits, so it was scheduled at `at`.
                        use leasehold_common::algo::Limiter;
                        pacer.lock().refund(units, at);
                    }
                }
            }
            ChargeKind::Local => {
                if let EntryState::Local(limiter) = &entry.state {
                    let at = super::local::LocalTime {
                        mono: at,
                        unix_offset_ns: self.unix_offset.get(),
                        wall,
                    };
                    limiter.lock().refund(units, at);
                }
            }
            ChargeKind::InFlight => entry.release_in_flight(units),
            ChargeKind::Emergency => {
                if let Some(bucket) = entry.emergency.lock().as_mut() {
                    use leasehold_common::algo::Limiter;
                    bucket.refund(units, at);
                }
            }
        }
    }
}

/// Shadow mode: a refusal becomes a would-deny that admits, uncharged.
fn shadow(step: &mut Step) {
    let reason = match step.outcome {
        Outcome::Denied(reason) => reason,
        Outcome::InvalidKey => DenyReason::InvalidKey,
        _ => return,
    };
    step.outcome = Outcome::ShadowDenied(reason);
    step.retry_after_ns = 0;
}

/// Makes `step`, the answer of dimension `index`, the request's refusal if it refused.
#[inline]
fn note_refusal(decision: &mut Decision, index: usize, step: &Step) {
    let reason = match step.outcome {
        Outcome::Denied(reason) => reason,
        Outcome::InvalidKey => DenyReason::InvalidKey,
        _ => return,
    };
    decision.denial = Some(Denial {
        dimension: Some(index),
        reason,
    });
    decision.retry_after_ns = step.retry_after_ns;
}

/// Appends dimension's result: `p` is the policy it resolved to, applied or replaced.
fn push_result(decision: &mut Decision, p: Option<&CompiledPolicy>, step: &Step) {
    decision.results.push_parts(Parts {
        policy_id: p.map(|p| &p.pid),
        policy_version: p.map_or(0, |p| p.version),
        outcome: step.outcome,
        limit: p.map_or(0, |p| p.capacity),
        remaining: if p.is_some() {
            word(&step.remaining)
        } else {
            0
        },
        reset_after_ns: if p.is_some() {
            word(&step.reset_after_ns)
        } else {
            0
        },
    });
}

/// Reads one word of a step on its own. The step's words were just stored one by one;
/// left to itself the compiler reads two at once, and such a read waits until both stores
/// have reached the cache (a store-forwarding stall, the most expensive instruction of
/// the whole decision).
#[inline(always)]
fn word(field: &u64) -> u64 {
    // SAFETY: `field` is a valid, aligned, initialised `u64` for as long as it is borrowed.
    unsafe { std::ptr::read_volatile(field) }
}

fn refuse(decision: &mut Decision, reason: DenyReason, retry_after_ns: u64) {
    decision.retry_after_ns = retry_after_ns;
    decision.denial = Some(Denial {
        dimension: None,
        reason,
    });
}
