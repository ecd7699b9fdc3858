//! The policy document's types. The format is described in the [module docs](super).

use super::shape::Shape;
use super::units::{HumanDuration, Ppm};
use crate::rate::{Rate, RateError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One policy document. Build it with [`Policy::from_yaml`]; a value built by hand must
/// pass [`Policy::validate`] before anything uses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<Dimension>,
    /// Dimension names in key order; empty means every dimension in declaration order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    #[serde(default)]
    pub cost: Cost,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<Calendar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// Admit with a bounded delay instead of refusing when the units are available soon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
    #[serde(default)]
    pub scope: Scope,
    /// How a budget beyond one process is enforced: leased credit (the default) or a
    /// decision per request by the owning allocator.
    #[serde(default, skip_serializing_if = "Enforcement::is_leased")]
    pub enforcement: Enforcement,
    #[serde(default)]
    pub failure: Failure,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_at: Option<jiff::Timestamp>,
    #[serde(default)]
    pub kill_switch: bool,
    #[serde(default)]
    pub lease: LeaseParams,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_classes: Vec<PriorityClass>,
    /// An envoyproxy/ratelimit domain's YAML, kept as written. Such a document stands for
    /// every limited rule of the domain, each enforced as its own policy (see
    /// [`envoy`](super::envoy)); the fields above that describe one limit stay unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratelimit: Option<String>,
}

/// A subject or resource dimension: the descriptor entry a key reads, and how its value
/// is canonicalised before it becomes part of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dimension {
    /// The descriptor entry key this dimension reads (`tenant`, `route`, `remote_address`).
    pub name: String,
    /// A request without this dimension is refused (or sent to the overflow key).
    #[serde(default)]
    pub required: bool,
    /// ASCII letters are lowercased, so `Acme` and `acme` share a key.
    #[serde(default)]
    pub lowercase: bool,
    /// Longest value accepted, in bytes after trimming.
    #[serde(default = "default_value_len_max")]
    pub max_len: u32,
    /// Missing-required, invalid and (with `values`) unlisted values all go to the
    /// policy's single overflow key instead of being refused.
    #[serde(default)]
    pub overflow: bool,
    /// Allow-list of canonical values; empty means any valid value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Default longest dimension value, in bytes.
pub const VALUE_LEN_MAX_DEFAULT: u32 = 128;

fn default_value_len_max() -> u32 {
    VALUE_LEN_MAX_DEFAULT
}

/// What one request costs. Decided by the enforcer from the request it sees, never
/// taken from the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    #[serde(default)]
    pub unit: CostUnit,
    /// Cost of a request (for `bytes`: cost when the size is not known).
    #[serde(default = "one")]
    pub default: u64,
    /// Exact route → cost, for `weighted`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, u64>,
}

fn one() -> u64 {
    1
}

impl Default for Cost {
    fn default() -> Self {
        Cost {
            unit: CostUnit::Request,
            default: 1,
            routes: BTreeMap::new(),
        }
    }
}

impl Cost {
    /// The cost of one request on `route` carrying `bytes` bytes (when known). A request
    /// is never free: an empty body still costs 1, or a flood of them would be unlimited.
    #[inline]
    pub fn of(&self, route: Option<&str>, bytes: Option<u64>) -> u64 {
        match self.unit {
            CostUnit::Request => self.default,
            CostUnit::Bytes => bytes.unwrap_or(self.default).max(1),
            CostUnit::Weighted => route
                .and_then(|r| self.routes.get(r))
                .copied()
                .unwrap_or(self.default),
        }
    }
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostUnit {
    #[default]
    Request,
    Bytes,
    Weighted,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    #[default]
    TokenBucket,
    Gcra,
    FixedWindow,
    SlidingWindow,
    CalendarQuota,
    Concurrency,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::CalendarQuota => "calendar_quota",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Whether the algorithm reads `rate`.
    pub fn uses_rate(self) -> bool {
        !matches!(self, Algorithm::CalendarQuota | Algorithm::Concurrency)
    }

    /// Whether the algorithm reads `burst`.
    pub fn uses_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

/// `units` every `per`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSpec {
    pub units: u64,
    pub per: HumanDuration,
}

impl RateSpec {
    pub fn to_rate(&self) -> Result<Rate, RateError> {
        Rate::new(self.units, self.per.as_ns())
    }
}

/// A quota per calendar period in a time zone (`calendar_quota` only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calendar {
    pub period: CalendarPeriod,
    /// IANA time zone name; periods start at local midnight there.
    #[serde(default = "utc")]
    pub time_zone: String,
    /// Units allowed per period.
    pub units: u64,
}

fn utc() -> String {
    "UTC".to_owned()
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CalendarPeriod {
    Day,
    Week,
    Month,
    Year,
}

/// Limit on requests in flight at once (`concurrency` only).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    pub max_in_flight: u64,
}

/// Which level of the hierarchy owns the policy's root bucket.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    #[default]
    Global,
    Region,
    Cell,
    Process,
}

/// How a policy's budget is enforced beyond one process.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Holders spend credit leased from the owning allocator, deciding locally.
    #[default]
    Leased,
    /// The owning allocator's leader decides every request, linearizably; nothing is
    /// leased.
    Exact,
}

impl Enforcement {
    pub fn is_leased(&self) -> bool {
        *self == Enforcement::Leased
    }
}

/// Behaviour while the upstream grantor cannot be reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub mode: FailureMode,
    /// `restricted` only: lowest priority still admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_priority: Option<u8>,
    /// `restricted` only: the local emergency rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateSpec>,
}

impl Default for Failure {
    fn default() -> Self {
        Failure {
            mode: FailureMode::CachedLease,
            min_priority: None,
            rate: None,
        }
    }
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    FailClosed,
    #[default]
    CachedLease,
    FailOpen,
    Restricted,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Enforce,
    Shadow,
}

/// How credit for this policy is leased down the hierarchy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseParams {
    pub ttl: HumanDuration,
    pub min_credit: u64,
    /// Largest single grant; unset means the policy's capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_credit: Option<u64>,
    /// Share of each grantor's credit held back as an emergency reserve, in `[0, 1)`.
    pub reserve_fraction: Ppm,
    /// Demand horizon a grant is sized for (rate × horizon); shorter than `ttl`.
    pub refresh_horizon: HumanDuration,
}

impl Default for LeaseParams {
    fn default() -> Self {
        LeaseParams {
            ttl: HumanDuration::from_secs(10),
            min_credit: 1,
            max_credit: None,
            reserve_fraction: Ppm(100_000),
            refresh_horizon: HumanDuration::from_secs(2),
        }
    }
}

/// A priority class for weighted max-min fair sharing under contention.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityClass {
    pub name: String,
    /// Higher is more important; `failure.min_priority` compares against it.
    pub priority: u8,
    /// Relative share when holders contend.
    #[serde(default = "one_u32")]
    pub weight: u32,
    /// May use capacity other classes leave idle, and gives it back when they return.
    #[serde(default)]
    pub borrow: bool,
}

fn one_u32() -> u32 {
    1
}

impl Policy {
    /// The effective burst: `burst`, or one period's worth of `rate` when unset.
    pub fn burst(&self) -> Option<u64> {
        if !self.algorithm.uses_burst() {
            return None;
        }
        self.burst.or(self.rate.map(|r| r.units))
    }

    /// The most units the policy's root bucket or window can ever hold at once; no single
    /// request costing more can ever be admitted.
    pub fn capacity(&self) -> Option<u64> {
        match self.algorithm {
            Algorithm::TokenBucket | Algorithm::Gcra => self.burst(),
            Algorithm::FixedWindow | Algorithm::SlidingWindow => self.rate.map(|r| r.units),
            Algorithm::CalendarQuota => self.calendar.as_ref().map(|c| c.units),
            Algorithm::Concurrency => self.concurrency.map(|c| c.max_in_flight),
        }
    }

    /// Dimensions in key order.
    pub fn key_dimensions(&self) -> impl Iterator<Item = &Dimension> + '_ {
        let explicit = (!self.key.is_empty()).then(|| {
            self.key
                .iter()
                .filter_map(|name| self.dimensions.iter().find(|d| &d.name == name))
        });
        let declared = self.key.is_empty().then(|| self.dimensions.iter());
        explicit
            .into_iter()
            .flatten()
            .chain(declared.into_iter().flatten())
    }

    /// The largest cost the policy can charge one request, with the field it comes from.
    /// `bytes` policies are not bounded here: a body larger than the capacity is refused.
    pub fn largest_cost(&self) -> (u64, String) {
        let mut best = (self.cost.default, "cost.default".to_owned());
        for (route, cost) in &self.cost.routes {
            if *cost > best.0 {
                best = (*cost, format!("cost.routes.{route}"));
            }
        }
        best
    }
}
