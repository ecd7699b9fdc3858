//! A policy rollout under traffic: mid-run an admin host applies a new version of the
//! policy through the allocator's admin service over the simulated network, as `leasectl
//! policy apply` does; the agents learn it from their watch streams and move onto
//! replacement leases. The budget bound is then checked per version ([`RolloutCheck`]).

use super::check::{check_admissions_by, Admission};
use super::clock::sim_now_ns;
use super::hosts::{agent_host, HostResult};
use super::receipts::LeaseReceipts;
use super::transport::sim_channels;
use super::{NetConfig, NetError};
use crate::bound::BoundCheck;
use leasehold_common::ledger::{Ledger, LedgerConfig};
use leasehold_common::rate::Rate;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_client::AdminServiceClient;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The admin host's name.
pub const ADMIN_HOST: &str = "admin-1";
/// How long the admin host waits before going round the allocators again.
const APPLY_RETRY_MS: u64 = 100;
/// Most rounds over the allocators before the admin host gives up.
const APPLY_ROUNDS_MAX: u32 = 200;

/// The new version of the policy and when it is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RolloutSpec {
    /// Simulated time the admin host first sends the new version, in milliseconds.
    pub at_ms: u64,
    /// The new version's rate `r₂`, in units per second, and burst `B₂`, in units.
    pub rate_per_s: u64,
    pub burst: u64,
}

impl RolloutSpec {
    /// The new version's rate `r₂`.
    ///
    /// # Panics
    /// If `rate_per_s` is zero; [`RolloutSpec::validate`] rejects that.
    pub fn rate(&self) -> Rate {
        Rate::per_second(self.rate_per_s).expect("validated rate")
    }

    pub(super) fn validate(&self, duration_ms: u64) -> Result<(), NetError> {
        let invalid = |field, value: u64, reason| {
            Err(NetError::InvalidConfig {
                field,
                value,
                reason,
            })
        };
        if Rate::per_second(self.rate_per_s).is_err() || self.rate_per_s == 0 {
            return invalid(
                "rollout.rate_per_s",
                self.rate_per_s,
                "must be a positive rate",
            );
        }
        if self.at_ms == 0 || self.at_ms >= duration_ms {
            return invalid(
                "rollout.at_ms",
                self.at_ms,
                "must be after the start and before the run ends",
            );
        }
        Ok(())
    }
}

/// How long an agent (re)started on the first version needs to learn the new one from its
/// watch stream: the agent's watch retry interval (1 s) twice.
pub const SETTLE_MS: u64 = 2_000;
/// Separates the drawn rollout's rng stream from the fault schedule's and turmoil's.
const ROLLOUT_SALT: u64 = 0x726f_6c6c_6f75_7421;
/// The new rate a drawn rollout picks, as a fraction of the old: (numerator, denominator).
const RATE_FACTORS: [(u64, u64); 3] = [(1, 5), (1, 2), (2, 1)];

/// A rollout drawn from `seed`: at an instant in `[start_ms, latest_ms]`, to a fifth, half
/// or twice the rate of `cfg`'s policy, with a burst from a quarter to twice its burst.
pub fn draw(seed: u64, cfg: &NetConfig, start_ms: u64, latest_ms: u64) -> RolloutSpec {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ROLLOUT_SALT);
    let at_ms = rng.random_range(start_ms..=latest_ms.max(start_ms));
    let (num, den) = RATE_FACTORS[rng.random_range(0..RATE_FACTORS.len())];
    let burst = rng.random_range(cfg.burst / 4..=cfg.burst * 2);
    RolloutSpec {
        at_ms,
        rate_per_s: (cfg.rate_per_s * num / den).max(1),
        burst: burst.max(1),
    }
}

/// What the admin host did, and what version each agent's engine enforced when.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutLog {
    /// When the first attempt was sent, in ns of simulated time.
    pub sent_ns: Option<u64>,
    /// When an allocator answered that the version was applied (it was applied earlier).
    pub applied_ns: Option<u64>,
    /// The version the allocator gave the new policy.
    pub version: u64,
    /// Calls made, including refusals by followers and timeouts.
    pub attempts: u32,
    /// Per agent, each change of the version its engine enforces: (ns, version).
    pub agent_versions: Vec<Vec<(u64, u64)>>,
}

/// The rollout log, shared by the admin and agent hosts.
#[derive(Clone, Default)]
pub struct RolloutShared(Arc<Mutex<RolloutLog>>);

impl RolloutShared {
    pub fn new(agents: usize) -> Self {
        RolloutShared(Arc::new(Mutex::new(RolloutLog {
            agent_versions: vec![Vec::new(); agents],
            ..RolloutLog::default()
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RolloutLog> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the version agent `agent`'s engine enforces at `at_ns`, if it changed.
    pub fn agent_version(&self, agent: usize, at_ns: u64, version: u64) {
        let mut log = self.lock();
        if let Some(changes) = log.agent_versions.get_mut(agent) {
            if changes.last().map(|c| c.1) != Some(version) {
                changes.push((at_ns, version));
            }
        }
    }

    fn applied(&self, at_ns: u64, version: u64) {
        let mut log = self.lock();
        log.applied_ns = Some(at_ns);
        log.version = version;
    }

    pub fn snapshot(&self) -> RolloutLog {
        self.lock().clone()
    }
}

/// The admin host: at the rollout instant applies the new version through the admin
/// service, trying every allocator in turn (a follower refuses, naming the leader) until one
/// answers, then idles.
pub async fn admin(cfg: NetConfig, spec: RolloutSpec, shared: RolloutShared) -> HostResult {
    tokio::time::sleep(Duration::from_millis(spec.at_ms)).await;
    let channels = sim_channels()?;
    let yaml = cfg.policy_yaml_with(spec.rate_per_s, spec.burst);
    for _ in 0..APPLY_ROUNDS_MAX {
        for addr in cfg.global_addrs() {
            let now = sim_now_ns();
            {
                let mut log = shared.lock();
                log.sent_ns.get_or_insert(now);
                log.attempts += 1;
            }
            let mut client = AdminServiceClient::new(channels.channel(&addr)?);
            let req = pb::ApplyPolicyRequest {
                yaml: yaml.clone(),
                ..pb::ApplyPolicyRequest::default()
            };
            if let Ok(resp) = client.apply_policy(req).await {
                shared.applied(sim_now_ns(), resp.into_inner().version);
                std::future::pending::<()>().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(APPLY_RETRY_MS)).await;
    }
    Err("no allocator applied the new policy version".into())
}

/// P1 around a rollout, checked per version as the model simulation does: windows wholly
/// before the first send against the old `B₁ + r₁·T`; windows starting within one lease
/// lifetime plus the write-off grace after the allocator's answer (the transition: credit
/// granted under the old version may still be spent) against `B₁ + B₂ + max(r₁, r₂)·T`;
/// windows starting after it against the new `B₂ + r₂·T`. Windows spanning the rollout
/// (from the first send to the answer) are not checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutCheck {
    pub before: BoundCheck,
    pub transition: BoundCheck,
    pub after: BoundCheck,
    /// When the transition ends, in ns: the answer plus the lease lifetime plus the grace.
    pub transition_end_ns: u64,
}

impl RolloutCheck {
    pub fn violations(&self) -> u64 {
        self.before.violations + self.transition.violations + self.after.violations
    }

    /// The three checks as one, for the report's overall bound.
    pub fn total(&self) -> BoundCheck {
        let parts = [&self.before, &self.transition, &self.after];
        let worst = parts.iter().max_by_key(|c| c.worst_excess).copied();
        BoundCheck {
            windows: parts.iter().map(|c| c.windows).sum(),
            violations: self.violations(),
            worst_excess: worst.map_or(0, |c| c.worst_excess),
            worst_start: worst.map_or(0, |c| c.worst_start),
        }
    }
}

/// The two policies and the instants that separate their checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phases {
    pub old: (Rate, u64),
    pub new: (Rate, u64),
    pub sent_ns: u64,
    pub applied_ns: u64,
    /// One lease lifetime plus the grantor's write-off grace, in ns.
    pub transition_ns: u64,
}

/// Checks `log` around a rollout described by `phases`.
pub fn check_rollout(log: &[Admission], p: &Phases) -> RolloutCheck {
    let end_ns = p.applied_ns.saturating_add(p.transition_ns);
    let bound = |(rate, burst): (Rate, u64), s: u64, e: u64| burst + rate.units_in(e - s);
    let max_rate = if p.old.0.units_in(1_000_000_000) >= p.new.0.units_in(1_000_000_000) {
        p.old.0
    } else {
        p.new.0
    };
    RolloutCheck {
        before: check_admissions_by(log, |s, e| (e < p.sent_ns).then(|| bound(p.old, s, e))),
        transition: check_admissions_by(log, |s, e| {
            (s >= p.applied_ns && s < end_ns).then(|| p.old.1 + bound((max_rate, p.new.1), s, e))
        }),
        after: check_admissions_by(log, |s, e| (s >= end_ns).then(|| bound(p.new, s, e))),
        transition_end_ns: end_ns,
    }
}

/// The version each agent's engine enforced at the end (0 if it never noted one).
pub fn final_versions(log: &RolloutLog) -> Vec<u64> {
    log.agent_versions
        .iter()
        .map(|c| c.last().map_or(0, |v| v.1))
        .collect()
}

/// When every agent last moved onto `version` and stayed on it, in ns; None if one did not
/// end on it.
pub fn all_on_version_ns(log: &RolloutLog, version: u64) -> Option<u64> {
    log.agent_versions.iter().try_fold(0, |latest, changes| {
        let &(at, v) = changes.last()?;
        (v == version).then_some(latest.max(at))
    })
}

/// What became of a rollout: when it was applied, the per-version bound, and where every
/// agent and its leases ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutReport {
    /// The new version's rate and burst, and when it was sent (configured or drawn).
    pub spec: RolloutSpec,
    pub log: RolloutLog,
    /// What the per-version check was run with.
    pub phases: Phases,
    pub check: RolloutCheck,
    /// The version each agent's engine enforced at the end.
    pub final_versions: Vec<u64>,
    /// When the last agent moved onto the new version for good, in ns.
    pub all_on_new_ns: Option<u64>,
    /// The agents' leases on the grantor's books at the end, by policy version.
    pub books_versions: BTreeMap<u64, usize>,
    /// Agents that no answer of their grantor reached after the transition: cut off from
    /// their grantor (or wedged, see "Not covered" in `docs/simulations.md`) for the rest of
    /// the run, they may not have heard of the new version, and are not held to it.
    pub out_of_reach: Vec<u32>,
    /// Agents that (re)started on the first version less than [`SETTLE_MS`] before the
    /// end: their watch stream may not have delivered the new version yet (a failed first
    /// attempt is retried a second later), so they are not held to it either.
    pub settling: Vec<u32>,
}

impl RolloutReport {
    /// The version was applied, P1 held per version, every agent that heard from its
    /// grantor after the transition and was not just restarted ended on the new version, and no lease of an older version is left
    /// on the books.
    pub fn holds(&self) -> bool {
        let v = self.log.version;
        let held = |i: &usize| {
            let a = *i as u32;
            !self.out_of_reach.contains(&a) && !self.settling.contains(&a)
        };
        self.log.applied_ns.is_some()
            && v > 1
            && self.check.violations() == 0
            && (0..self.final_versions.len())
                .filter(held)
                .all(|i| self.final_versions[i] == v)
            && self.books_versions.keys().all(|&b| b == v)
    }
}

/// The agents' leases on `ledger`'s books, by policy version.
pub(super) fn books_versions(ledger: &Ledger, agents: usize) -> BTreeMap<u64, usize> {
    let holders: Vec<String> = (0..agents).map(agent_host).collect();
    let mut out = BTreeMap::new();
    for r in ledger.leases() {
        if holders.contains(&r.lease.holder_id) {
            *out.entry(r.lease.policy_version).or_insert(0) += 1;
        }
    }
    out
}

/// One lease lifetime plus the longest write-off grace of the run's ledgers: after this
/// long from the rollout, no credit of the old version is left to spend.
pub fn transition_ms(cfg: &NetConfig) -> u64 {
    let grace_ms = LedgerConfig::root("").expiry_grace_ms;
    let region_grace_ms = LedgerConfig::delegated("").expiry_grace_ms;
    cfg.lease_ttl_ms + grace_ms.max(region_grace_ms)
}

/// The rollout's report once the run is over.
pub(super) fn report(
    cfg: &NetConfig,
    spec: &RolloutSpec,
    log: RolloutLog,
    admissions: &[Admission],
    books_versions: BTreeMap<u64, usize>,
    receipts: &LeaseReceipts,
) -> RolloutReport {
    let applied_ns = log.applied_ns.unwrap_or(u64::MAX);
    let transition_end_ns = applied_ns.saturating_add(transition_ms(cfg) * 1_000_000);
    let out_of_reach = (0..cfg.agents as u32)
        .filter(|&a| {
            receipts
                .last_heard_ns(a)
                .is_none_or(|t| t < transition_end_ns)
        })
        .collect();
    let settle_from_ns = (cfg.duration_ms.saturating_sub(SETTLE_MS)) * 1_000_000;
    let settling = (0..cfg.agents as u32)
        .filter(|&a| {
            log.agent_versions[a as usize]
                .iter()
                .any(|&(at, v)| v < log.version && at >= settle_from_ns)
        })
        .collect();
    let transition_ms = transition_ms(cfg);
    // Never applied: every window from the first send on stays under the old policy's
    // transition bound, and the report fails on `applied_ns`.
    let sent_ns = log.sent_ns.unwrap_or(u64::MAX);
    let phases = Phases {
        old: (cfg.rate(), cfg.burst),
        new: (spec.rate(), spec.burst),
        sent_ns,
        applied_ns,
        transition_ns: transition_ms * 1_000_000,
    };
    RolloutReport {
        spec: *spec,
        check: check_rollout(admissions, &phases),
        phases,
        final_versions: final_versions(&log),
        all_on_new_ns: all_on_version_ns(&log, log.version),
        books_versions,
        out_of_reach,
        settling,
        log,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, n: usize) -> Vec<Admission> {
        vec![
            Admission {
                at_ns: ms * 1_000_000,
                agent: 0,
            };
            n
        ]
    }

    /// Old policy B = 4, 10/s; new B = 1, 1/s; sent at 1 s, applied by 1.1 s, transition
    /// 0.5 s: so windows before 1 s, starting in [1.1 s, 1.6 s) and from 1.6 s on.
    fn phases() -> Phases {
        Phases {
            old: (Rate::per_second(10).unwrap(), 4),
            new: (Rate::per_second(1).unwrap(), 1),
            sent_ns: 1_000_000_000,
            applied_ns: 1_100_000_000,
            transition_ns: 500_000_000,
        }
    }

    #[test]
    fn each_window_is_held_to_its_own_version() {
        // Four at once before the rollout: the old burst allows it.
        let ok = check_rollout(&at(500, 4), &phases());
        assert_eq!((ok.violations(), ok.before.windows), (0, 1));
        // The same after the transition breaks the new burst of one.
        let late = check_rollout(&at(2_000, 4), &phases());
        assert_eq!((late.after.violations, late.after.worst_excess), (1, 3));
        // Within the transition both bursts count: five pass, six do not.
        assert_eq!(check_rollout(&at(1_200, 5), &phases()).violations(), 0);
        let six = check_rollout(&at(1_200, 6), &phases());
        assert_eq!(
            (six.transition.violations, six.transition.worst_excess),
            (1, 1)
        );
    }

    #[test]
    fn windows_spanning_the_rollout_are_not_checked() {
        // Four before it and four while it is being applied: eight in 50 ms would break
        // either bound, but no window lies wholly on one side.
        let mut log = at(990, 4);
        log.extend(at(1_040, 4));
        let c = check_rollout(&log, &phases());
        assert_eq!(c.violations(), 0);
        assert_eq!(c.before.windows + c.transition.windows + c.after.windows, 1);
    }
}

#[cfg(test)]
mod draw_tests {
    use super::*;

    #[test]
    fn a_drawn_rollout_follows_the_seed_and_stays_in_range() {
        let cfg = NetConfig::quick();
        let a = draw(7, &cfg, 1_000, 5_000);
        assert_eq!(a, draw(7, &cfg, 1_000, 5_000));
        let drawn: Vec<RolloutSpec> = (0..200).map(|s| draw(s, &cfg, 1_000, 5_000)).collect();
        assert!(drawn.iter().any(|d| *d != a));
        for d in &drawn {
            assert!((1_000..=5_000).contains(&d.at_ms), "{d:?}");
            assert!([20, 50, 200].contains(&d.rate_per_s), "{d:?}");
            assert!((50..=400).contains(&d.burst), "{d:?}");
            assert!(d.validate(cfg.duration_ms).is_ok());
        }
    }
}
