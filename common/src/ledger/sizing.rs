//! How much credit one grant carries.
//!
//! A grant follows demand: the holder asks for what its measured demand needs over the
//! refresh horizon. When the key is contended (active holders together want more than the
//! key produces per horizon) a grant is capped at the holder's weighted max-min fair share,
//! and over time each holder receives what it earned of that share (see
//! [`super::entitlement`]), so idle credit flows to demand without letting anyone starve
//! the rest or gain by asking more often. A share of the key is held back as an emergency
//! reserve for high priorities.

use super::account::Account;
use super::command::DenyReason;
use super::fair::{max_min_shares, Claim};
use super::params::{PolicyParams, PPM};
use crate::time::Nanos;

const NS_PER_MS: u64 = 1_000_000;

/// One request for credit, as the sizing sees it.
pub struct Ask<'a> {
    pub holder_id: &'a str,
    pub want: u64,
    pub priority: u32,
    /// Unspent credit the holder already has on this key.
    pub held: u64,
}

/// Units of demand over the horizon for a demand in milli-units per second.
pub fn demand_per_horizon(demand_milli_per_sec: u64, horizon_ms: u64) -> u64 {
    let units = u128::from(demand_milli_per_sec) * u128::from(horizon_ms) / 1_000_000;
    u64::try_from(units).unwrap_or(u64::MAX)
}

/// For a key supplied by an upstream lease that ends within its tail at `now` (the tail of
/// one lease ttl, as a window keeps its own): the time left until its deadline. A sub-lease granted then would live a few milliseconds, less
/// than holders take off every lease for safety, and its holder would leave it unspent.
fn upstream_tail_left(account: &Account, ttl_ms: u64, now: Nanos) -> Option<u64> {
    let super::account::Supply::Upstream(u) = &account.supply else {
        return None;
    };
    let tail_ns = super::window::tail_ns(ttl_ms.saturating_mul(NS_PER_MS));
    let left_ns = u.deadline.saturating_since(now);
    (u.lease_id.is_some() && left_ns < tail_ns).then_some(left_ns)
}

/// Fair-share weight of a priority: higher priorities weigh more.
pub fn weight_of(priority: u32) -> u64 {
    u64::from(priority) + 1
}

/// The grant for `ask`, or why none can be made and when to ask again. Either way the
/// answer is noted against the holder's entitlement (drawn down by a grant, marked waiting
/// when short), so later asks see what it is still owed.
pub fn size_grant(
    account: &mut Account,
    params: &PolicyParams,
    ask: &Ask<'_>,
    now: Nanos,
) -> Result<u64, (DenyReason, u64)> {
    let lp = &params.lease;
    let asked = ask.want.min(lp.max_credit.saturating_sub(ask.held));
    let contended = contention(account, params, ask, now);
    let sized = size(account, params, ask, contended.as_ref(), now);
    if let Some(slot) = account.holders.get_mut(ask.holder_id) {
        let units = *sized.as_ref().unwrap_or(&0);
        let share = contended.map_or(0, |c| c.share);
        let horizon_ns = lp.refresh_horizon_ms.saturating_mul(NS_PER_MS);
        slot.entitled.note(units, asked, now, share, horizon_ns);
    }
    sized
}

fn size(
    account: &mut Account,
    params: &PolicyParams,
    ask: &Ask<'_>,
    contended: Option<&Contention>,
    now: Nanos,
) -> Result<u64, (DenyReason, u64)> {
    let lp = &params.lease;
    let horizon_ns = lp.refresh_horizon_ms.saturating_mul(NS_PER_MS);
    let headroom = lp.max_credit.saturating_sub(ask.held);
    if headroom == 0 {
        return Err((DenyReason::MaxCredit, horizon_ns));
    }
    let mut target = ask.want.min(headroom);
    if let Some(left_ns) = upstream_tail_left(account, lp.ttl_ms, now) {
        // Sub-leased now, the credit could barely be spent before the holder's deadline;
        // the holder asks again once the upstream lease has been renewed or replaced.
        return Err((DenyReason::Exhausted, left_ns.max(1)));
    }
    let available = account.available(now);
    let reserve = reserve_units(account.ceiling(), lp.reserve_ppm);
    let may_use_reserve = ask.priority >= lp.reserve_priority_min;
    let usable = if may_use_reserve {
        available
    } else {
        available.saturating_sub(reserve)
    };
    if let Some(c) = contended {
        let room = c.share.max(lp.min_credit).saturating_sub(ask.held);
        if room == 0 {
            return Err((DenyReason::FairShare, horizon_ns));
        }
        let mine = earned_part(usable, c.owed_me, c.owed_others);
        let need = target.min(lp.min_credit).max(1);
        if mine >= need {
            target = target.min(room).min(mine);
        } else if usable >= need {
            // There is credit, but it is held for holders that earned it.
            return Err((DenyReason::FairShare, (horizon_ns / 4).max(1)));
        }
        // Otherwise there is too little for anyone: answered below as exhausted.
    }
    let need = target.min(lp.min_credit).max(1);
    if usable < need {
        let reason = if available >= need {
            DenyReason::ReserveOnly
        } else {
            DenyReason::Exhausted
        };
        let missing = need + if may_use_reserve { 0 } else { reserve } - usable;
        return Err((reason, retry_after_ns(account, missing, horizon_ns, now)));
    }
    Ok(target.min(usable))
}

/// What an asker that earned `owed_me` may take of `usable` while the other waiting
/// holders earned `owed_others`: what they earned is held for them (they are back for it
/// within their next ask; one that stops asking stops being waited for), the rest is free to
/// take. When there is less than everyone earned, each gets its proportion, so the order in
/// which holders ask does not decide the split.
fn earned_part(usable: u64, owed_me: u64, owed_others: u64) -> u64 {
    let owed = u128::from(owed_me) + u128::from(owed_others);
    if u128::from(usable) >= owed {
        return usable - owed_others;
    }
    let part = u128::from(usable) * u128::from(owed_me) / owed.max(1);
    u64::try_from(part).unwrap_or(u64::MAX)
}

fn reserve_units(ceiling: u64, reserve_ppm: u64) -> u64 {
    let units = u128::from(ceiling) * u128::from(reserve_ppm) / u128::from(PPM);
    u64::try_from(units).unwrap_or(u64::MAX)
}

fn retry_after_ns(account: &Account, missing: u64, horizon_ns: u64, now: Nanos) -> u64 {
    match &account.supply {
        super::account::Supply::Bucket(b) => b.rate().ns_until(missing, 0).max(1),
        // New credit arrives when the upstream driver next tops the key up, which it does
        // as soon as the key runs low: well within a horizon.
        super::account::Supply::Upstream(_) => (horizon_ns / 4).max(1),
        super::account::Supply::Window(w) => w.ns_until(missing, now),
    }
}

/// A contended key as one asking holder sees it, in units per refresh horizon.
struct Contention {
    /// The asker's weighted max-min fair share.
    share: u64,
    /// What the asker earned of its share and was not yet granted.
    owed_me: u64,
    /// What the other holders that are waiting for credit are still owed.
    owed_others: u64,
}

/// The asking holder's view of the key when active holders together want more than the key
/// can supply; `None` when the key is not contended.
fn contention(
    account: &Account,
    params: &PolicyParams,
    ask: &Ask<'_>,
    now: Nanos,
) -> Option<Contention> {
    let lp = &params.lease;
    let horizon_ns = lp.refresh_horizon_ms.saturating_mul(NS_PER_MS);
    let active_ns = lp.ttl_ms.saturating_mul(NS_PER_MS);
    let capacity = account.capacity(horizon_ns);
    let mut claims = Vec::new();
    let mut slots = Vec::new();
    let mut mine = None;
    for (id, slot) in &account.holders {
        let active = slot.current.is_some() || now.saturating_since(slot.last_seen) < active_ns;
        if !active {
            continue;
        }
        let mut demand = demand_per_horizon(slot.demand_milli_per_sec, lp.refresh_horizon_ms);
        if id == ask.holder_id {
            demand = demand.max(ask.want);
            mine = Some(claims.len());
        }
        claims.push(Claim {
            demand,
            weight: params
                .weights
                .get(id)
                .copied()
                .unwrap_or_else(|| weight_of(slot.priority)),
        });
        slots.push(slot);
    }
    let mine = mine?;
    if claims.iter().filter(|c| c.demand > 0).count() < 2 {
        // Nobody to be fair to: a lone holder with demand may take the burst.
        return None;
    }
    let total: u128 = claims.iter().map(|c| u128::from(c.demand)).sum();
    if total <= u128::from(capacity) {
        return None;
    }
    let shares = max_min_shares(capacity, &claims);
    let owed = |i: usize| slots[i].entitled.owed(now, shares[i], horizon_ns);
    // A holder counts as waiting for about two horizons after it was last short, long
    // enough to cover a saturated holder's return, short enough that one that went quiet
    // stops holding credit back.
    let waiting_ns = horizon_ns.saturating_mul(2);
    let owed_others = (0..slots.len())
        .filter(|&i| i != mine && slots[i].entitled.waiting(now, waiting_ns))
        .map(owed)
        .fold(0u64, u64::saturating_add);
    Some(Contention {
        share: shares[mine],
        owed_me: owed(mine),
        owed_others,
    })
}
