//! What the ledger needs to know about a policy and about itself.

use super::window::WindowSpec;
use crate::rate::Rate;
use serde::{Deserialize, Serialize};

/// Parts per million, the ledger's unit for every fraction.
pub const PPM: u64 = 1_000_000;

/// Lease sizing and lifetime for one policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseParams {
    /// Lifetime of each lease version, measured from its grant.
    pub ttl_ms: u64,
    /// Smallest grant worth sending; smaller remainders are refused as exhausted.
    pub min_credit: u64,
    /// Largest unspent credit one holder may have outstanding.
    pub max_credit: u64,
    /// Share of the key's capacity held back for `reserve_priority_min` and above.
    pub reserve_ppm: u64,
    /// Lowest priority that may draw on the reserve.
    pub reserve_priority_min: u32,
    /// How far ahead a grant should last at the holder's measured demand.
    pub refresh_horizon_ms: u64,
}

impl Default for LeaseParams {
    fn default() -> Self {
        LeaseParams {
            ttl_ms: 10_000,
            min_credit: 1,
            max_credit: 100_000,
            reserve_ppm: 50_000,
            reserve_priority_min: 8,
            refresh_horizon_ms: 2_000,
        }
    }
}

/// One policy as the ledger applies it to each of its keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyParams {
    pub policy_id: String,
    pub version: u64,
    /// Sustained rate of the root bucket (a delegated ledger uses it only for fair share).
    pub rate: Rate,
    /// Largest credit the root bucket stores, leased-out credit included.
    pub burst: u64,
    pub lease: LeaseParams,
    /// Fair-share weight per holder id (a budget split across children); holders not named
    /// weigh `priority + 1`.
    #[serde(default)]
    pub weights: std::collections::BTreeMap<String, u64>,
    /// A window or calendar allowance; `None` for a token bucket of `rate` and `burst`.
    /// For a window, `rate` is its limit per window length and `burst` its limit, which is
    /// what fair shares and the reserve are measured against.
    #[serde(default)]
    pub window: Option<WindowSpec>,
    /// The level whose allocator owns the policy's budget (the policy's scope); ledgers
    /// below it sub-lease from their upstream.
    #[serde(default)]
    pub owner: Level,
    /// `enforcement: exact`: every request is decided by the owning ledger; no credit is
    /// leased.
    #[serde(default)]
    pub exact: bool,
}

/// A level of the allocator hierarchy, from the top.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Level {
    #[default]
    Global,
    Region,
    Cell,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Global => "global",
            Level::Region => "region",
            Level::Cell => "cell",
        }
    }

    /// Parses `global`, `region` or `cell`.
    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "global" => Some(Level::Global),
            "region" => Some(Level::Region),
            "cell" => Some(Level::Cell),
            _ => None,
        }
    }
}

/// Where a ledger's credit comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Owns each key's token bucket.
    Root,
    /// Holds leases from an upstream grantor and sub-leases only that credit.
    Delegated,
}

/// Bounds on everything the ledger stores (P4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLimits {
    pub policies_max: usize,
    pub keys_max: usize,
    pub key_len_max: usize,
    pub holder_id_len_max: usize,
    pub holders_per_key_max: usize,
    pub leases_max: usize,
}

impl Default for LedgerLimits {
    fn default() -> Self {
        LedgerLimits {
            policies_max: 10_000,
            keys_max: 1_000_000,
            key_len_max: 256,
            holder_id_len_max: 128,
            holders_per_key_max: 4_096,
            leases_max: 2_000_000,
        }
    }
}

/// Fixed settings of one ledger (the same on every replica).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerConfig {
    pub grantor_id: String,
    pub role: Role,
    /// Extra time after a lease's expiry before its credit is written off, covering the
    /// grantor's own clock drift and leader hand-over.
    pub expiry_grace_ms: u64,
    pub limits: LedgerLimits,
    /// The hierarchy level this ledger serves. A delegated ledger owns the budget of every
    /// policy scoped at its level or below it and sub-leases the rest from upstream; a root
    /// ledger owns every budget.
    #[serde(default)]
    pub level: Level,
}

impl LedgerConfig {
    pub fn root(grantor_id: impl Into<String>) -> Self {
        LedgerConfig {
            grantor_id: grantor_id.into(),
            role: Role::Root,
            expiry_grace_ms: 1_000,
            limits: LedgerLimits::default(),
            level: Level::Global,
        }
    }

    /// A delegated region ledger; set `level` for another level.
    pub fn delegated(grantor_id: impl Into<String>) -> Self {
        LedgerConfig {
            role: Role::Delegated,
            level: Level::Region,
            ..LedgerConfig::root(grantor_id)
        }
    }

    /// Whether this ledger owns the budget of `params` rather than sub-leasing it.
    pub fn owns(&self, params: &PolicyParams) -> bool {
        self.role == Role::Root || params.owner >= self.level
    }
}

/// Why a policy cannot be run by the ledger.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseableError {
    #[error("policy '{0}': scope process is enforced by each process on its own")]
    ProcessScope(String),
    #[error("policy '{0}': concurrency limits are enforced by each process on its own")]
    Concurrency(String),
    #[error("policy '{0}': a leased {1} policy needs {2}")]
    Missing(String, &'static str, &'static str),
}

/// Nominal length of a calendar period, for sizing and fair shares only (the periods
/// themselves follow the calendar).
fn nominal_ns(period: crate::policy::CalendarPeriod) -> u64 {
    use crate::policy::CalendarPeriod;
    const DAY_NS: u64 = 86_400_000_000_000;
    match period {
        CalendarPeriod::Day => DAY_NS,
        CalendarPeriod::Week => 7 * DAY_NS,
        CalendarPeriod::Month => 30 * DAY_NS,
        CalendarPeriod::Year => 365 * DAY_NS,
    }
}

impl PolicyParams {
    /// The ledger's view of version `version` of `policy`: every algorithm but
    /// `concurrency` is leased (or decided per request) when its scope is beyond one
    /// process.
    pub fn from_policy(
        policy: &crate::policy::Policy,
        version: u64,
    ) -> Result<PolicyParams, LeaseableError> {
        use crate::policy::{Algorithm, Enforcement, Scope};
        let id = || policy.id.clone();
        let algorithm = policy.algorithm.name();
        let owner = match policy.scope {
            Scope::Global => Level::Global,
            Scope::Region => Level::Region,
            Scope::Cell => Level::Cell,
            Scope::Process => return Err(LeaseableError::ProcessScope(id())),
        };
        let rate_spec = || {
            policy
                .rate
                .and_then(|s| s.to_rate().ok().map(|r| (s, r)))
                .ok_or_else(|| LeaseableError::Missing(id(), algorithm, "a rate"))
        };
        let (rate, burst, window) = match policy.algorithm {
            Algorithm::TokenBucket | Algorithm::Gcra => {
                let (spec, rate) = rate_spec()?;
                (rate, policy.burst().unwrap_or(spec.units).max(1), None)
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                let (spec, rate) = rate_spec()?;
                let (window_ns, limit) = (spec.per.as_ns(), spec.units.max(1));
                let window = if policy.algorithm == Algorithm::FixedWindow {
                    WindowSpec::Fixed { window_ns, limit }
                } else {
                    WindowSpec::Sliding { window_ns, limit }
                };
                (rate, limit, Some(window))
            }
            Algorithm::CalendarQuota => {
                let cal = policy
                    .calendar
                    .as_ref()
                    .ok_or_else(|| LeaseableError::Missing(id(), algorithm, "a calendar"))?;
                let limit = cal.units.max(1);
                let rate = Rate::new(limit, nominal_ns(cal.period))
                    .map_err(|_| LeaseableError::Missing(id(), algorithm, "a valid calendar"))?;
                let window = WindowSpec::Calendar {
                    period: cal.period,
                    zone: cal.time_zone.clone(),
                    limit,
                };
                (rate, limit, Some(window))
            }
            Algorithm::Concurrency => return Err(LeaseableError::Concurrency(id())),
        };
        let lp = &policy.lease;
        let priority_min = policy.failure.min_priority.map_or(8, u32::from);
        Ok(PolicyParams {
            policy_id: id(),
            version,
            rate,
            burst,
            lease: LeaseParams {
                ttl_ms: (lp.ttl.as_ns() / 1_000_000).max(1),
                min_credit: lp.min_credit.max(1),
                max_credit: lp.max_credit.unwrap_or(burst).max(lp.min_credit.max(1)),
                reserve_ppm: lp.reserve_fraction.0.min(PPM - 1),
                reserve_priority_min: priority_min,
                refresh_horizon_ms: (lp.refresh_horizon.as_ns() / 1_000_000).max(1),
            },
            weights: Default::default(),
            window,
            owner,
            exact: policy.enforcement == Enforcement::Exact,
        })
    }
}
