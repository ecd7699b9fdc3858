//! Checking one policy dimension: overrides, the key's state, then its algorithm.

use super::admit::{Ctx, Step};
use super::decision::{DenyReason, Outcome};
use super::fastkey::{values_hash, PlainValues};
use super::local::{LocalCharge, LocalTime};
use super::policy::{CompiledPolicy, Emergency};
use super::stats::Count;
use super::table::{Entry, EntryState, TableFull};
use super::tcache::{EntryCache, KeyBuffers, Scratch};
use super::undo::{ChargeKind, Found};
use super::Engine;
use leasehold_common::algo::{Decision as AlgoDecision, Limiter, TokenBucket};
use leasehold_common::rate::Rate;
use std::sync::Arc;

/// A built key, its hash in the table, and the hash of its plain values if they were.
struct KeyAt<'k> {
    key: &'k str,
    hash: u64,
    values_hash: Option<u64>,
}

impl Engine {
    /// Inline, as every step of the hot path: a step returned from a call is read back in
    /// pieces other than those it was written in, and the read waits.
    #[inline(always)]
    pub(crate) fn check_policy(
        &self,
        p: &CompiledPolicy,
        entries: &[(&str, &str)],
        units: u64,
        ctx: &mut Ctx<'_>,
        scratch: Scratch<'_>,
    ) -> Step {
        if p.policy.kill_switch {
            return Step::pass(Outcome::KillSwitch);
        }
        let emergency = p.runtime.emergency.get();
        if emergency == Emergency::FailOpen {
            return Step::pass(Outcome::FailOpen);
        }
        let Scratch {
            keys,
            entries: cached,
            ..
        } = scratch;
        let KeyBuffers { fast, builder } = keys;
        let mut values = PlainValues::new();
        let found = p.fast_key.find_values(entries, &mut values);
        let found_hash = found.then(|| values_hash(&values, p.generation));
        if let Some(vh) = found_hash {
            // This cache holds only entries made from plain values, and values matching
            // such an entry's key are those plain values: they need no checking. (The key
            // is compared here rather than in a closure, which stays a call.)
            if let Some(entry) = cached.get_plain(vh, p.generation) {
                if p.fast_key.is_key_of(&values, entry.key()) {
                    // SAFETY: the thread's key cache keeps its entries alive until the
                    // request ends (`EntryCache`).
                    let found = unsafe { Found::held(entry) };
                    return self.on_entry(p, entry.key(), found, units, emergency, ctx);
                }
            }
        }
        let plain = found && p.fast_key.are_plain(&values);
        let values_hash = found_hash.filter(|_| plain);
        let key: &str = if plain {
            p.fast_key.write(&values, fast);
            fast
        } else {
            match builder.build(&p.schema, entries) {
                Err(_) => {
                    return Step {
                        retry_after_ns: u64::MAX,
                        ..Step::pass(Outcome::InvalidKey)
                    }
                }
                Ok(built) if built.overflow.is_some() => {
                    let overflow = overflow_of(p, ctx.now);
                    let key = p.schema.overflow_key();
                    return self.on_entry(p, key, overflow, units, emergency, ctx);
                }
                Ok(built) => built.key,
            }
        };
        let hash = self.table.hash(key);
        if let Some(entry) = cached.get(key, hash, p.generation) {
            // SAFETY: as for the plain values' cache above.
            let found = unsafe { Found::held(entry) };
            return self.on_entry(p, key, found, units, emergency, ctx);
        }
        let at = KeyAt {
            key,
            hash,
            values_hash,
        };
        self.via_table(p, at, cached, units, emergency, ctx)
    }

    /// The key's entry from the shared table (made if missing), remembered in the thread's
    /// cache: by `values_hash` when the request's values were plain, else by the key.
    fn via_table(
        &self,
        p: &CompiledPolicy,
        at: KeyAt<'_>,
        cached: &mut EntryCache,
        units: u64,
        emergency: Emergency,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let KeyAt {
            key,
            hash,
            values_hash,
        } = at;
        let remember = |cached: &mut EntryCache, entry: &'_ Arc<Entry>| -> bool {
            if !entry.cacheable() {
                return false;
            }
            match values_hash {
                Some(vh) => cached.put_plain(vh, entry),
                None => cached.put(entry),
            }
            true
        };
        let found = self.table.with(key, hash, p.generation, |entry| {
            let found = found_in(entry, remember(cached, entry));
            self.on_entry(p, key, found, units, emergency, ctx)
        });
        if let Some(step) = found {
            return step;
        }
        let now = ctx.now;
        let at = LocalTime::from_unix(now, ctx.unix_offset_ns());
        let made = self
            .table
            .get_or_insert(key, hash, p.generation, at, |stale| p.new_state(stale, now));
        match made {
            Ok((entry, _)) => {
                let found = found_in(&entry, remember(cached, &entry));
                self.on_entry(p, key, found, units, emergency, ctx)
            }
            Err(TableFull) => {
                self.counters.bump(Count::TableFull);
                let overflow = overflow_of(p, now);
                let key = p.schema.overflow_key();
                self.on_entry(p, key, overflow, units, emergency, ctx)
            }
        }
    }

    /// Checks one key's state. Runs inside the key table's read section: it must not
    /// write to the table.
    #[inline(always)]
    fn on_entry(
        &self,
        p: &CompiledPolicy,
        key: &str,
        entry: Found<'_>,
        units: u64,
        emergency: Emergency,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        entry.touch(ctx.now, self.table.touch_ns());
        if units > p.capacity {
            return Step::deny(DenyReason::CostAboveCapacity, 0, u64::MAX);
        }
        if let Emergency::Restricted { min_priority, rate } = emergency {
            return restricted(entry, units, min_priority, rate, ctx);
        }
        match &entry.state {
            EntryState::Leased { slot, .. } => {
                let step = self.check_leased(p, key, entry, units, ctx);
                if p.shadow && matches!(step.outcome, Outcome::Denied(_)) {
                    slot.note_shadow_denied();
                }
                step
            }
            EntryState::Exact => self.check_exact(p, entry, units, ctx),
            EntryState::Local(_) if p.max_delay_ns > 0 => {
                self.check_local_shaped(entry, units, p.max_delay_ns, ctx)
            }
            EntryState::Local(_) => check_local(entry, units, ctx),
            EntryState::InFlight { .. } => check_in_flight(entry, units, ctx),
        }
    }
}

#[inline(always)]
fn check_local(entry: Found<'_>, units: u64, ctx: &mut Ctx<'_>) -> Step {
    let EntryState::Local(limiter) = &entry.state else {
        unreachable!("called for local entries only");
    };
    let mut guard = limiter.lock();
    // Only calendar quotas read the wall clock, and never inside the lock's short section.
    let wall = if guard.reads_wall() {
        drop(guard);
        let wall = ctx.wall();
        guard = limiter.lock();
        wall
    } else {
        jiff::Timestamp::UNIX_EPOCH
    };
    let at = LocalTime {
        mono: ctx.now,
        unix_offset_ns: ctx.unix_offset_ns(),
        wall,
    };
    let charge = guard.try_take(units, at);
    drop(guard);
    if !charge.admitted {
        return over_limit(&charge);
    }
    if ctx.keep {
        ctx.charged(ChargeKind::Local, entry, units);
    }
    Step {
        outcome: Outcome::Admitted,
        remaining: charge.remaining,
        reset_after_ns: charge.reset_after_ns,
        retry_after_ns: 0,
    }
}

/// A concurrency limit has no time to wait for: a refusal's retry hint is 0 ("when a
/// request in flight finishes").
/// The refusal of a local limiter that did not admit `charge`.
pub(crate) fn over_limit(charge: &LocalCharge) -> Step {
    Step {
        reset_after_ns: charge.reset_after_ns,
        ..Step::deny(
            DenyReason::OverLimit,
            charge.remaining,
            charge.retry_after_ns,
        )
    }
}

fn check_in_flight(entry: Found<'_>, units: u64, ctx: &mut Ctx<'_>) -> Step {
    let EntryState::InFlight { max, .. } = &entry.state else {
        unreachable!("called for concurrency entries only");
    };
    match entry.acquire_in_flight(units) {
        Ok(count) => {
            // Held until the request ends, whether or not a later dimension may refuse.
            ctx.charged(ChargeKind::InFlight, entry, units);
            Step {
                outcome: Outcome::Admitted,
                remaining: max - count,
                reset_after_ns: 0,
                retry_after_ns: 0,
            }
        }
        Err(count) => Step::deny(DenyReason::OverLimit, max.saturating_sub(count), 0),
    }
}

/// `entry`, found in the key table: held by this thread until the request ends if
/// `cached` (just put in its key cache).
fn found_in(entry: &Arc<Entry>, cached: bool) -> Found<'_> {
    if cached {
        // SAFETY: the thread's key cache keeps its entries alive until the request ends.
        unsafe { Found::held(entry) }
    } else {
        Found::shared(entry)
    }
}

/// The policy's overflow entry, which lives as long as the rule set this thread holds
/// while it decides.
fn overflow_of(p: &CompiledPolicy, now: leasehold_common::time::Nanos) -> Found<'_> {
    // SAFETY: the policy (and with it the entry) belongs to the rule set the thread's
    // cache holds for the whole request.
    unsafe { Found::held(p.overflow_entry(now)) }
}

/// Restricted operation: only priority ≥ `min_priority`, at most at `rate` for this key
/// (a local bucket holding one period's worth, made when first needed).
pub(crate) fn restricted(
    entry: Found<'_>,
    units: u64,
    min_priority: u8,
    rate: Rate,
    ctx: &mut Ctx<'_>,
) -> Step {
    let hint = rate.ns_until(units, 0);
    if ctx.priority < min_priority {
        return Step::deny(DenyReason::Restricted, 0, hint);
    }
    let mut bucket = entry.emergency.lock();
    let bucket = match &mut *bucket {
        Some(b) if b.rate() == rate => b,
        other => other.insert(Box::new(TokenBucket::full(rate, rate.units(), ctx.now))),
    };
    match bucket.try_take(units, ctx.now) {
        AlgoDecision::Admit { remaining } => {
            if ctx.keep {
                ctx.charged(ChargeKind::Emergency, entry, units);
            }
            Step {
                outcome: Outcome::Restricted,
                remaining,
                reset_after_ns: bucket.ns_until(bucket.burst()),
                retry_after_ns: 0,
            }
        }
        AlgoDecision::Deny {
            remaining,
            retry_after_ns,
        } => Step::deny(DenyReason::Restricted, remaining, retry_after_ns),
    }
}
