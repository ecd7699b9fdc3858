//! Leasehold policies: what is limited, by how much, keyed how, and what happens when
//! the upstream cannot be reached.
//!
//! A policy is a YAML document written by people and applied with `leasectl policy
//! apply`. It is parsed strictly (an unknown or misspelt field is an error, never
//! ignored), then validated; every broken rule is reported at once, each naming its field
//! path and the reason:
//!
//! ```text
//! rate.units: must be positive
//! burst: 3 is below the largest cost 5 (cost.routes./v1/search)
//! calendar: required when algorithm is calendar_quota
//! lease.reserve_fraction: 1.5 is outside [0, 1)
//! policy YAML: unknown field `brust`, expected one of `id`, ... at line 7 column 1
//! ```
//!
//! A [`PolicySet`] keeps numbered versions of each policy: applying a changed document
//! makes a new version, applying the same one again does not, a rollback makes a new
//! version equal to an old one, and [`diff`] lists what changed field by field.
//!
//! # Example
//!
//! ```yaml
//! id: tenant-api
//! description: Search API, per tenant and route
//! dimensions:
//!   - name: tenant
//!     required: true
//!     lowercase: true
//!     overflow: true
//!   - name: route
//!     values: [/v1/search, /v1/items]
//!     overflow: true
//! key: [tenant, route]
//! cost:
//!   unit: weighted
//!   default: 1
//!   routes: { /v1/search: 5 }
//! algorithm: token_bucket
//! rate: { units: 100, per: 1s }
//! burst: 200
//! scope: global
//! failure: { mode: cached_lease }
//! mode: enforce
//! effective_at: 2026-12-01T00:00:00Z
//! lease: { ttl: 10s, min_credit: 1, max_credit: 100, reserve_fraction: 0.1, refresh_horizon: 2s }
//! priority_classes:
//!   - { name: interactive, priority: 10, weight: 3 }
//!   - { name: batch, priority: 1, weight: 1, borrow: true }
//! ```
//!
//! # Fields
//!
//! Only `id` is always required. Everything else has the default shown.
//!
//! * **`id`** — 1 to 64 of `a-z`, `0-9`, `-`. Names the policy everywhere: keys, leases,
//!   metrics, `leasectl`.
//! * **`description`** — free text, at most 1024 bytes.
//! * **`dimensions`** (none) — at most 8 subject or resource dimensions. Each reads the
//!   request's descriptor entry of the same `name` (1 to 64 of `A-Z a-z 0-9 _ . -`, case
//!   sensitive, matching Envoy descriptor keys). Per dimension:
//!   * `required` (false): a request without it is refused, or overflows (below). An
//!     absent optional dimension is keyed as `~none`.
//!   * `lowercase` (false): ASCII letters are lowercased before keying.
//!   * `max_len` (128, at most 256): longest value in bytes, after trimming.
//!   * `values` (any): an allow-list of canonical values (trimmed, lowercase if
//!     `lowercase`); at most 1024.
//!   * `overflow` (false): a missing required value, an invalid or unlisted value, or one
//!     that would make the key too long does not refuse the request; it spends from the
//!     policy's single overflow key instead. Use it on identity dimensions so that
//!     unauthenticated or unknown traffic shares one bounded bucket (P4).
//!
//!   Values are trimmed of spaces and tabs, control characters are refused, and keys are
//!   built and encoded as described in [`crate::key`].
//! * **`key`** (every dimension, in declared order) — the order of dimensions in the key.
//!   It must list every declared dimension exactly once.
//! * **`cost`** — what one request costs, decided by the enforcer from what it sees
//!   (never a client-supplied number):
//!   * `unit` (`request`): `request` charges `default` per request; `bytes` charges the
//!     request's size in bytes as measured by the enforcer (`default` when unknown, and
//!     at least 1 so that empty requests are not free);
//!     `weighted` charges `routes[route]` for a route listed there, else `default`.
//!   * `default` (1): positive.
//!   * `routes` (none): exact route → positive cost; only with `unit: weighted`; at most
//!     1024 routes of at most 256 bytes.
//! * **`algorithm`** (`token_bucket`) — one of:
//!   * `token_bucket`: refills `rate` continuously up to `burst`.
//!   * `gcra`: the same limit as a token bucket, kept as a theoretical arrival time.
//!   * `fixed_window`: at most `rate.units` per window of length `rate.per`.
//!   * `sliding_window`: the same, over a window that slides instead of resetting.
//!   * `calendar_quota`: at most `calendar.units` per calendar `period` in `time_zone`.
//!   * `concurrency`: at most `concurrency.max_in_flight` units in flight at once.
//! * **`rate`** — `{ units, per }`: `units` (positive) every `per`. Durations are an
//!   integer and a unit: `ns`, `us`, `ms`, `s`, `m`, `h`, `d` (`500ms`, `1s`, `1m`, `1h`,
//!   `1d`); `per` is positive and at most `366d`. Required by every algorithm but
//!   `calendar_quota` and `concurrency`, which refuse it.
//! * **`burst`** (one period's worth: `rate.units`) — positive; the bucket's capacity.
//!   Only for `token_bucket` and `gcra`.
//! * **`calendar`** — `{ period: day|week|month|year, time_zone (UTC), units }`; required
//!   for, and only for, `calendar_quota`. `time_zone` is an IANA name
//!   (`Europe/Berlin`); periods start at local midnight (weeks on Monday).
//! * **`concurrency`** — `{ max_in_flight }` from 1 to 1,000,000; required for, and only
//!   for, `concurrency`.
//!
//!   The policy's *capacity* is `burst` (bucket, GCRA), `rate.units` (windows),
//!   `calendar.units` or `max_in_flight`. The largest cost (`cost.default` and every
//!   `cost.routes` entry) must fit in it, or such requests could never be admitted.
//! * **`shape`** (none) — `{ max_delay }`, positive and at most `60s`: a request the
//!   limit would refuse now, whose units are available within `max_delay`, is admitted
//!   and charged now with a delay to wait first. Refused for `concurrency`,
//!   `calendar_quota` and `enforcement: exact`. See `docs/policy.md`, "Shaping".
//! * **`scope`** (`global`) — which level owns the root bucket: `global`, `region`,
//!   `cell` or `process`.
//! * **`failure`** (`{ mode: cached_lease }`) — behaviour while the upstream grantor is
//!   unreachable:
//!   * `fail_closed`: deny as soon as the upstream is found unreachable, even with
//!     credit in hand, for limits where an isolated enforcer must not act alone.
//!   * `cached_lease`: keep spending held credit until its lease expires, then deny.
//!   * `fail_open`: admit; those admissions are counted apart and never hidden (P1, P7).
//!   * `restricted`: admit only requests of priority ≥ `min_priority` (0–255), at most
//!     at the local emergency `rate`, which may not exceed the policy's own `rate`. Both
//!     fields are required for, and refused without, `restricted`.
//! * **`mode`** (`enforce`) — `shadow` decides and counts would-be denials but admits.
//! * **`effective_at`** (immediately) — RFC 3339 instant from which this version applies.
//! * **`kill_switch`** (false) — when true every request is admitted, counted apart as
//!   admitted by the kill switch.
//! * **`lease`** — how credit is leased down the hierarchy:
//!   * `ttl` (`10s`, from `10ms` to `1h`): lease lifetime.
//!   * `min_credit` (1) and `max_credit` (the capacity): bounds on one grant; both at
//!     most the capacity, `min_credit ≤ max_credit`.
//!   * `reserve_fraction` (0.1, in `[0, 1)`): share held back by each grantor as an
//!     emergency reserve. Written as a decimal (`0.1`) or a percentage (`"10%"`) with at
//!     most six decimal places, stored exactly in parts per million.
//!   * `refresh_horizon` (`2s`, positive, shorter than `ttl`): the demand a grant is sized
//!     for (measured rate × horizon), so holders ask again before running dry.
//! * **`priority_classes`** (none) — at most 16 classes `{ name, priority, weight (1),
//!   borrow (false) }`: `name` as `id`, `priority` 0–255 and unique, `weight` 1–1000 (its
//!   share under weighted max-min fair sharing), `borrow` lets the class use capacity
//!   others leave idle until they return.
//! * **`ratelimit`** (none) — an envoyproxy/ratelimit domain's YAML, at most 96 KiB; the
//!   document then stands for every rule of the domain and its id must be
//!   `ratelimit-<domain>`. Such a document is normally made by applying the
//!   envoyproxy/ratelimit file itself; see [`envoy::document`].
//!
//! Numbers are exact integers throughout; fractions become parts per million at parsing
//! and durations become nanoseconds, so no decision ever rounds a float.

mod diff;
pub mod envoy;
mod error;
mod model;
pub mod nesting;
mod set;
mod shape;
mod stored;
mod units;
mod validate;

pub use diff::{diff, FieldChange};
pub use error::{FieldError, FieldErrors, PolicyError, Problem};
pub use model::{
    Algorithm, Calendar, CalendarPeriod, Concurrency, Cost, CostUnit, Dimension, Enforcement,
    Failure, FailureMode, LeaseParams, Mode, Policy, PriorityClass, RateSpec, Scope,
    VALUE_LEN_MAX_DEFAULT,
};
pub use set::{
    Applied, PolicySet, PolicySetError, PolicySetLimits, PolicyVersion, POLICIES_MAX_DEFAULT,
    VERSIONS_KEPT_MAX_DEFAULT,
};
pub use shape::{Shape, SHAPE_MAX_DELAY_LIMIT};
pub use units::{HumanDuration, Ppm, PPM_ONE};
pub use validate::{
    is_valid_dimension_name, is_valid_policy_id, COST_ROUTES_MAX, DESCRIPTION_LEN_MAX,
    DIMENSIONS_MAX, DIMENSION_VALUES_MAX, DIMENSION_VALUE_LEN_LIMIT, LEASE_TTL_MAX, LEASE_TTL_MIN,
    MAX_IN_FLIGHT_LIMIT, NAME_LEN_MAX, POLICY_ID_LEN_MAX, PRIORITY_CLASSES_MAX,
    PRIORITY_WEIGHT_MAX, RATE_PER_MAX, ROUTE_LEN_MAX,
};

/// Longest policy document accepted, in bytes.
pub const POLICY_YAML_LEN_MAX: usize = 256 * 1024;

impl Policy {
    /// Parses and validates one policy document, or one envoyproxy/ratelimit file, which
    /// becomes the document of its domain ([`envoy::document`]).
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        if text.len() > POLICY_YAML_LEN_MAX {
            return Err(PolicyError::Yaml(format!(
                "document is {} bytes, at most {POLICY_YAML_LEN_MAX} allowed",
                text.len()
            )));
        }
        nesting::check_nesting(text).map_err(PolicyError::Yaml)?;
        if envoy::is_ratelimit_yaml(text) {
            return Policy::from_ratelimit_yaml(text);
        }
        let policy: Policy =
            serde_norway::from_str(text).map_err(|e| PolicyError::Yaml(e.to_string()))?;
        policy.validate().map_err(PolicyError::Invalid)?;
        Ok(policy)
    }

    /// Writes the policy as YAML that [`Policy::from_yaml`] reads back to an equal value.
    /// A domain document leaves out the fields of one limit while they hold their defaults:
    /// they mean nothing there.
    pub fn to_yaml(&self) -> Result<String, PolicyError> {
        let yaml = |e: serde_norway::Error| PolicyError::Yaml(e.to_string());
        if self.ratelimit.is_none() {
            return serde_norway::to_string(self).map_err(yaml);
        }
        let mut value = serde_norway::to_value(self).map_err(yaml)?;
        if let serde_norway::Value::Mapping(fields) = &mut value {
            if self.cost == Cost::default() {
                fields.shift_remove("cost");
            }
            if self.algorithm == Algorithm::default() {
                fields.shift_remove("algorithm");
            }
            if self.lease == LeaseParams::default() {
                fields.shift_remove("lease");
            }
        }
        serde_norway::to_string(&value).map_err(yaml)
    }
}
