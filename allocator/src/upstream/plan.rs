//! What a delegated allocator should do next about each key's upstream lease.
//!
//! Pure: it reads the replicated ledger at one instant and decides, so the same decisions
//! follow from the same state on whichever node leads. The driver carries them out.

use leasehold_common::ledger::sizing::demand_per_horizon;
use leasehold_common::ledger::{Account, Ledger, Supply, UpstreamPosition};
use leasehold_common::time::Nanos;

const NS_PER_MS: u64 = 1_000_000;

/// Knobs of the upstream driver.
#[derive(Clone, Debug)]
pub struct PlanSettings {
    /// Longest time between usage reports on an upstream lease (each report also renews it).
    pub report_every_ms: u64,
    /// A key none of whose holders was heard from for this long releases its upstream lease.
    pub idle_release_ms: u64,
    /// Idle credit beyond this many times the wanted credit goes back upstream.
    pub keep_wants_max: u64,
    /// Keys looked at per round; the rest wait for the next round.
    pub keys_per_round_max: usize,
    /// How long past an upstream lease's deadline its sub-leases may take to settle before
    /// the lease is left for the grantor to write off.
    pub ended_settle_ms: u64,
}

impl Default for PlanSettings {
    fn default() -> Self {
        PlanSettings {
            report_every_ms: 500,
            idle_release_ms: 30_000,
            keep_wants_max: 2,
            keys_per_round_max: 4_096,
            ended_settle_ms: 750,
        }
    }
}

/// One delegated key as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyView {
    pub policy_id: String,
    pub policy_version: u64,
    pub key: String,
    /// The current upstream lease, if any.
    pub position: Option<UpstreamPosition>,
    /// Credit the key's active holders need over the policy's horizon (twice it, so that
    /// renewals downstream never wait on the upstream).
    pub want: u64,
    /// Sum of the active holders' measured demand, milli-units per second.
    pub demand_milli_per_sec: u64,
    pub priority: u32,
    /// When a holder of the key was last heard from.
    pub last_active: Nanos,
}

/// The next step for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do now.
    Wait,
    /// No upstream lease and holders want credit.
    Acquire,
    /// Report usage (renewing the lease), first giving back `give_back` idle units, and
    /// ask for `want_more`.
    Report { give_back: u64, want_more: u64 },
    /// The upstream lease reached its deadline and its sub-leases did not settle in time:
    /// stop sub-leasing it and leave it for the grantor to write off.
    Expired,
    /// Nobody uses the key any more: give everything back and release the lease.
    Release,
}

/// Up to `limit` delegated keys of `ledger` with what their holders want, starting after
/// key `after` and wrapping around, so that with more keys than one round takes, every key
/// still gets its turn.
pub fn views(ledger: &Ledger, now: Nanos, after: Option<&str>, limit: usize) -> Vec<KeyView> {
    let later = ledger
        .accounts()
        .skip_while(|(key, _)| after.is_some_and(|a| key.as_str() <= a));
    let earlier = ledger
        .accounts()
        .take_while(|(key, _)| after.is_some_and(|a| key.as_str() <= a));
    later
        .chain(earlier)
        .filter_map(|(key, acct)| view(ledger, key, acct, now))
        .take(limit)
        .collect()
}

fn view(ledger: &Ledger, key: &str, acct: &Account, now: Nanos) -> Option<KeyView> {
    let Supply::Upstream(_) = acct.supply else {
        return None;
    };
    let params = ledger.policy(&acct.policy_id)?;
    let active_ns = params.lease.ttl_ms.saturating_mul(NS_PER_MS);
    let horizon_ms = params.lease.refresh_horizon_ms.saturating_mul(2);
    let mut v = KeyView {
        policy_id: acct.policy_id.clone(),
        policy_version: params.version,
        key: key.to_string(),
        position: ledger.upstream_position(key),
        want: 0,
        demand_milli_per_sec: 0,
        priority: 0,
        last_active: Nanos::ZERO,
    };
    for slot in acct.holders.values() {
        v.last_active = v.last_active.max(slot.last_seen);
        if now.saturating_since(slot.last_seen) > active_ns {
            continue;
        }
        let need = demand_per_horizon(slot.demand_milli_per_sec, horizon_ms);
        v.want = v.want.saturating_add(need.max(params.lease.min_credit));
        v.demand_milli_per_sec = v
            .demand_milli_per_sec
            .saturating_add(slot.demand_milli_per_sec);
        v.priority = v.priority.max(slot.priority);
    }
    Some(v)
}

/// A lease past its deadline (a window's end, or renewals that did not get through). Once
/// every sub-lease under it is settled its usage is exact, and releasing it tells the
/// grantor what was spent; otherwise the grantor would count all it did not hear of as
/// stranded, as it must for a holder that vanished.
fn ended(p: &UpstreamPosition, now: Nanos, s: &PlanSettings) -> Step {
    let settling = now.saturating_since(p.deadline) < s.ended_settle_ms.saturating_mul(NS_PER_MS);
    match p.final_used() {
        Some(_) if settling => Step::Release,
        None if settling => Step::Wait,
        _ => Step::Expired,
    }
}

/// Decides the next step for `v` at `now`; `last_report` is when this driver last reported
/// on the key (None after a leader change: report soon).
pub fn plan(v: &KeyView, now: Nanos, last_report: Option<Nanos>, s: &PlanSettings) -> Step {
    let Some(p) = &v.position else {
        return if v.want > 0 {
            Step::Acquire
        } else {
            Step::Wait
        };
    };
    if now >= p.deadline {
        return ended(p, now, s);
    }
    let idle_ns = s.idle_release_ms.saturating_mul(NS_PER_MS);
    if v.want == 0 && now.saturating_since(v.last_active) >= idle_ns {
        return Step::Release;
    }
    let keep = v.want.saturating_mul(s.keep_wants_max.max(1));
    let give_back = p.idle.saturating_sub(keep);
    let left = p.idle - give_back;
    let low = left.saturating_mul(2) < v.want;
    let due = last_report
        .is_none_or(|t| now.saturating_since(t) >= s.report_every_ms.saturating_mul(NS_PER_MS));
    if due || low || give_back > 0 {
        Step::Report {
            give_back,
            want_more: v.want.saturating_sub(left),
        }
    } else {
        Step::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(idle: u64, deadline_s: u64) -> UpstreamPosition {
        UpstreamPosition {
            upstream_lease_id: 1,
            credit: idle,
            idle,
            on_lease: 0,
            used: 0,
            returned: 0,
            generation: 1,
            deadline: Nanos(deadline_s * 1_000_000_000),
        }
    }

    fn view(position: Option<UpstreamPosition>, want: u64, last_active_s: u64) -> KeyView {
        KeyView {
            policy_id: "p".into(),
            policy_version: 1,
            key: "k".into(),
            position,
            want,
            demand_milli_per_sec: want * 1_000,
            priority: 0,
            last_active: Nanos(last_active_s * 1_000_000_000),
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn every_key_gets_its_turn_when_a_round_takes_fewer() {
        use leasehold_common::ledger::{Acquire, Command, LedgerConfig, PolicyParams};
        let mut l = Ledger::new(LedgerConfig::delegated("region"));
        let params = PolicyParams {
            policy_id: "p".into(),
            version: 1,
            rate: leasehold_common::rate::Rate::per_second(10).unwrap(),
            burst: 10,
            lease: Default::default(),
            weights: Default::default(),
            window: None,
            owner: Default::default(),
            exact: false,
        };
        l.apply(Nanos(0), Command::PutPolicy(params)).unwrap();
        for key in ["a", "b", "c"] {
            let ask = Command::Acquire(Acquire {
                holder_id: "h".into(),
                policy_id: "p".into(),
                key: key.into(),
                want_credit: 1,
                demand_milli_per_sec: 0,
                request_id: 1,
                priority: 0,
            });
            l.apply(Nanos(0), ask).unwrap();
        }
        let keys = |after, limit| -> Vec<String> {
            views(&l, Nanos(0), after, limit)
                .into_iter()
                .map(|v| v.key)
                .collect()
        };
        assert_eq!(keys(None, 2), ["a", "b"]);
        assert_eq!(keys(Some("b"), 2), ["c", "a"]);
        assert_eq!(keys(Some("c"), 5), ["a", "b", "c"]);
    }

    #[test]
    fn acquires_only_for_wanted_keys() {
        let s = PlanSettings::default();
        assert_eq!(plan(&view(None, 10, 0), Nanos(S), None, &s), Step::Acquire);
        assert_eq!(plan(&view(None, 0, 0), Nanos(S), None, &s), Step::Wait);
    }

    #[test]
    fn an_ended_lease_with_nothing_sub_leased_is_released_with_its_usage() {
        let s = PlanSettings::default();
        let v = view(Some(pos(50, 10)), 10, 9);
        assert_eq!(
            plan(&v, Nanos(10 * S), Some(Nanos(10 * S)), &s),
            Step::Release
        );
        let late = Nanos(10 * S + s.ended_settle_ms * NS_PER_MS);
        assert_eq!(plan(&v, late, Some(late), &s), Step::Expired);
    }

    #[test]
    fn an_ended_lease_waits_for_its_sub_leases_then_is_left_to_expire() {
        let s = PlanSettings::default();
        let mut p = pos(0, 10);
        p.on_lease = 5;
        let v = view(Some(p), 10, 9);
        assert_eq!(plan(&v, Nanos(10 * S), Some(Nanos(10 * S)), &s), Step::Wait);
        let late = Nanos(10 * S + s.ended_settle_ms * NS_PER_MS);
        assert_eq!(plan(&v, late, Some(late), &s), Step::Expired);
    }

    #[test]
    fn reports_when_due_low_or_holding_too_much() {
        let s = PlanSettings::default();
        let recent = Some(Nanos(S));
        let fine = view(Some(pos(15, 10)), 10, 1);
        assert_eq!(plan(&fine, Nanos(S), recent, &s), Step::Wait);
        assert_eq!(
            plan(&fine, Nanos(2 * S), recent, &s),
            Step::Report {
                give_back: 0,
                want_more: 0
            },
            "due after report_every_ms"
        );
        let low = view(Some(pos(4, 10)), 10, 1);
        assert_eq!(
            plan(&low, Nanos(S), recent, &s),
            Step::Report {
                give_back: 0,
                want_more: 6
            }
        );
        let rich = view(Some(pos(100, 10)), 10, 1);
        assert_eq!(
            plan(&rich, Nanos(S), recent, &s),
            Step::Report {
                give_back: 80,
                want_more: 0
            }
        );
    }

    #[test]
    fn releases_only_after_holders_went_quiet() {
        let s = PlanSettings::default();
        let quiet = view(Some(pos(5, 100)), 0, 1);
        assert_eq!(
            plan(&quiet, Nanos(31 * S), Some(Nanos(31 * S)), &s),
            Step::Release
        );
        assert_ne!(
            plan(&quiet, Nanos(20 * S), Some(Nanos(20 * S)), &s),
            Step::Release
        );
    }
}
