//! The rules a parsed policy must keep. Every broken rule is reported, each naming its
//! field path, so an author fixes a document in one round.

use super::error::{Collector, FieldErrors, Problem};
use super::model::{
    Algorithm, Calendar, CostUnit, Dimension, Enforcement, FailureMode, Policy, RateSpec, Scope,
};
use super::units::{HumanDuration, PPM_ONE};
use crate::key;
use std::collections::BTreeSet;

/// Longest policy id, in bytes.
pub const POLICY_ID_LEN_MAX: usize = 64;
/// Longest description, in bytes.
pub const DESCRIPTION_LEN_MAX: usize = 1024;
/// Most dimensions one policy may key on.
pub const DIMENSIONS_MAX: usize = 8;
/// Longest dimension or priority class name, in bytes.
pub const NAME_LEN_MAX: usize = 64;
/// Largest `max_len` a dimension may declare, in bytes.
pub const DIMENSION_VALUE_LEN_LIMIT: u32 = 256;
/// Most allow-listed values per dimension.
pub const DIMENSION_VALUES_MAX: usize = 1024;
/// Most weighted routes.
pub const COST_ROUTES_MAX: usize = 1024;
/// Longest route in `cost.routes`, in bytes.
pub const ROUTE_LEN_MAX: usize = 256;
/// Most priority classes.
pub const PRIORITY_CLASSES_MAX: usize = 16;
/// Largest priority class weight.
pub const PRIORITY_WEIGHT_MAX: u32 = 1000;
/// Longest `rate.per`: longer periods are calendar quotas.
pub const RATE_PER_MAX: HumanDuration = HumanDuration::from_secs(366 * 86_400);
/// Shortest lease.
pub const LEASE_TTL_MIN: HumanDuration = HumanDuration::from_millis(10);
/// Longest lease: longer leases strand too much credit when a holder dies.
pub const LEASE_TTL_MAX: HumanDuration = HumanDuration::from_secs(3600);
/// Most requests in flight a concurrency policy may allow.
pub const MAX_IN_FLIGHT_LIMIT: u64 = 1_000_000;
/// Shortest window of a fixed or sliding window policy shared beyond one process: its
/// credit is leased window by window, and a shorter window would be mostly spent waiting
/// for leases.
pub const LEASED_WINDOW_MIN: HumanDuration = HumanDuration::from_secs(1);

const ID_RULE: &str = "use 1 to 64 of a-z, 0-9 and '-'";
const DIMENSION_RULE: &str = "use 1 to 64 of A-Z, a-z, 0-9, '_', '.' and '-'";

impl Policy {
    /// Checks every rule and reports all that are broken.
    pub fn validate(&self) -> Result<(), FieldErrors> {
        let mut c = Collector::default();
        if let Some(text) = &self.ratelimit {
            // The domain names the id and the rules are the limits: checked there.
            check_description(self, &mut c);
            check_failure(self, &mut c);
            if self.shape.is_some() {
                let when = "the document is envoyproxy/ratelimit YAML".to_owned();
                c.push("shape", Problem::NotUsed { when });
            }
            super::envoy::document::check(self, text, &mut c);
            return c.finish();
        }
        check_identity(self, &mut c);
        check_dimensions(self, &mut c);
        check_key(self, &mut c);
        check_cost(self, &mut c);
        check_algorithm(self, &mut c);
        check_scope(self, &mut c);
        check_capacity(self, &mut c);
        check_failure(self, &mut c);
        super::shape::check(self, &mut c);
        check_lease(self, &mut c);
        check_priority_classes(self, &mut c);
        c.finish()
    }
}

/// `[a-z0-9-]{1,64}`: safe in keys, file names, metric labels and URLs.
pub fn is_valid_policy_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= POLICY_ID_LEN_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `[A-Za-z0-9_.-]{1,64}`: wide enough for Envoy descriptor keys, and free of the key
/// separators `:`, `/`, `=` and of the reserved `~`.
pub fn is_valid_dimension_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn check_identity(p: &Policy, c: &mut Collector) {
    if !is_valid_policy_id(&p.id) {
        c.push("id", bad_name(&p.id, ID_RULE));
    }
    check_description(p, c);
}

fn check_description(p: &Policy, c: &mut Collector) {
    if p.description.len() > DESCRIPTION_LEN_MAX {
        c.push(
            "description",
            too_long(p.description.len(), DESCRIPTION_LEN_MAX),
        );
    }
}

fn check_dimensions(p: &Policy, c: &mut Collector) {
    if p.dimensions.len() > DIMENSIONS_MAX {
        c.push("dimensions", too_many(p.dimensions.len(), DIMENSIONS_MAX));
    }
    let mut seen = BTreeSet::new();
    for (i, d) in p.dimensions.iter().enumerate() {
        let at = format!("dimensions[{i}]");
        if !is_valid_dimension_name(&d.name) {
            c.push(format!("{at}.name"), bad_name(&d.name, DIMENSION_RULE));
        } else if !seen.insert(d.name.as_str()) {
            c.push(format!("{at}.name"), duplicate(&d.name));
        }
        if d.max_len == 0 || d.max_len > DIMENSION_VALUE_LEN_LIMIT {
            let range = format!("[1, {DIMENSION_VALUE_LEN_LIMIT}]");
            c.push(format!("{at}.max_len"), out_of_range(d.max_len, range));
        }
        check_dimension_values(d, &at, c);
    }
}

/// Allow-listed values must already be canonical, or they could never match.
fn check_dimension_values(d: &Dimension, at: &str, c: &mut Collector) {
    if d.values.len() > DIMENSION_VALUES_MAX {
        let problem = too_many(d.values.len(), DIMENSION_VALUES_MAX);
        c.push(format!("{at}.values"), problem);
        return;
    }
    let mut scratch = String::new();
    let mut seen = BTreeSet::new();
    for (j, v) in d.values.iter().enumerate() {
        let path = format!("{at}.values[{j}]");
        let max_len = d.max_len as usize;
        match key::canonicalize(v, d.lowercase, max_len, &mut scratch) {
            Ok(Some(canon)) if canon == v => {
                if !seen.insert(v.as_str()) {
                    c.push(path, duplicate(v));
                }
            }
            Ok(Some(canon)) => {
                let why = format!("it canonicalises to '{canon}'");
                c.push(path, not_canonical(v, why));
            }
            Ok(None) => c.push(path, not_canonical(v, "it is empty".into())),
            Err(problem) => c.push(path, not_canonical(v, problem.to_string())),
        }
    }
}

fn check_key(p: &Policy, c: &mut Collector) {
    if p.key.is_empty() {
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, name) in p.key.iter().enumerate() {
        if !p.dimensions.iter().any(|d| &d.name == name) {
            let problem = Problem::UnknownDimension { name: name.clone() };
            c.push(format!("key[{i}]"), problem);
        } else if !seen.insert(name.as_str()) {
            c.push(format!("key[{i}]"), duplicate(name));
        }
    }
    for (i, d) in p.dimensions.iter().enumerate() {
        if !p.key.contains(&d.name) {
            let problem = Problem::DimensionNotInKey {
                name: d.name.clone(),
            };
            c.push(format!("dimensions[{i}]"), problem);
        }
    }
}

fn check_cost(p: &Policy, c: &mut Collector) {
    if p.cost.default == 0 {
        c.push("cost.default", Problem::MustBePositive);
    }
    if p.cost.unit != CostUnit::Weighted && !p.cost.routes.is_empty() {
        let when = "cost.unit is not weighted".to_owned();
        c.push("cost.routes", Problem::NotUsed { when });
    }
    if p.cost.routes.len() > COST_ROUTES_MAX {
        c.push(
            "cost.routes",
            too_many(p.cost.routes.len(), COST_ROUTES_MAX),
        );
    }
    for (route, cost) in &p.cost.routes {
        let path = format!("cost.routes.{route}");
        if route.is_empty() {
            c.push(path.clone(), not_canonical(route, "it is empty".into()));
        } else if route.len() > ROUTE_LEN_MAX {
            c.push(path.clone(), too_long(route.len(), ROUTE_LEN_MAX));
        }
        if *cost == 0 {
            c.push(path, Problem::MustBePositive);
        }
    }
}

fn check_algorithm(p: &Policy, c: &mut Collector) {
    let algo = p.algorithm;
    let when_algo = || format!("algorithm is {}", algo.name());
    match (&p.rate, algo.uses_rate()) {
        (Some(rate), true) => check_rate("rate", rate, c),
        (None, true) => c.push("rate", Problem::Required { when: when_algo() }),
        (Some(_), false) => c.push("rate", Problem::NotUsed { when: when_algo() }),
        (None, false) => {}
    }
    if p.burst.is_some() && !algo.uses_burst() {
        c.push("burst", Problem::NotUsed { when: when_algo() });
    }
    if p.burst == Some(0) {
        c.push("burst", Problem::MustBePositive);
    }
    match (&p.calendar, algo == Algorithm::CalendarQuota) {
        (Some(cal), true) => check_calendar(cal, c),
        (None, true) => c.push("calendar", Problem::Required { when: when_algo() }),
        (Some(_), false) => c.push("calendar", Problem::NotUsed { when: when_algo() }),
        (None, false) => {}
    }
    match (&p.concurrency, algo == Algorithm::Concurrency) {
        (Some(conc), true) => {
            if conc.max_in_flight == 0 || conc.max_in_flight > MAX_IN_FLIGHT_LIMIT {
                let range = format!("[1, {MAX_IN_FLIGHT_LIMIT}]");
                let problem = out_of_range(conc.max_in_flight, range);
                c.push("concurrency.max_in_flight", problem);
            }
        }
        (None, true) => c.push("concurrency", Problem::Required { when: when_algo() }),
        (Some(_), false) => c.push("concurrency", Problem::NotUsed { when: when_algo() }),
        (None, false) => {}
    }
}

/// Every budget beyond one process is owned by one allocator; refuse what it cannot honour
/// rather than let each process enforce the whole limit on its own.
fn check_scope(p: &Policy, c: &mut Collector) {
    let shared = p.scope != Scope::Process;
    let scope = format!("scope {}", scope_name(p.scope));
    if p.algorithm == Algorithm::Concurrency && shared {
        c.push(
            "scope",
            Problem::Unsupported {
                value: scope.clone(),
                when: "for algorithm concurrency".into(),
                instead: "in-flight limits guard one process's dependencies; set scope: process"
                    .into(),
            },
        );
    }
    if p.enforcement == Enforcement::Exact && !shared {
        c.push(
            "enforcement",
            Problem::Unsupported {
                value: "exact".into(),
                when: "with scope process".into(),
                instead:
                    "exact decisions are made by an allocator; use scope global, region or cell"
                        .into(),
            },
        );
    }
    let windowed = matches!(
        p.algorithm,
        Algorithm::FixedWindow | Algorithm::SlidingWindow
    );
    if let Some(rate) = p.rate.filter(|r| windowed && shared && r.per.as_ns() > 0) {
        if rate.per < LEASED_WINDOW_MIN && p.enforcement == Enforcement::Leased {
            c.push(
                "rate.per",
                Problem::Unsupported {
                    value: rate.per.to_string(),
                    when: format!("for a {} shared beyond one process", p.algorithm.name()),
                    instead: format!(
                        "its credit is leased window by window; use a window of at least \
                         {LEASED_WINDOW_MIN}, enforcement: exact, or scope: process"
                    ),
                },
            );
        }
    }
}

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "global",
        Scope::Region => "region",
        Scope::Cell => "cell",
        Scope::Process => "process",
    }
}

fn check_rate(at: &str, rate: &RateSpec, c: &mut Collector) {
    if rate.units == 0 {
        c.push(format!("{at}.units"), Problem::MustBePositive);
    }
    if rate.per.as_ns() == 0 {
        c.push(format!("{at}.per"), Problem::MustBePositive);
    } else if rate.per > RATE_PER_MAX {
        let problem = Problem::Exceeds {
            value: rate.per.to_string(),
            limit: format!("{RATE_PER_MAX} (use calendar_quota for longer periods)"),
        };
        c.push(format!("{at}.per"), problem);
    }
}

fn check_calendar(cal: &Calendar, c: &mut Collector) {
    if cal.units == 0 {
        c.push("calendar.units", Problem::MustBePositive);
    }
    if jiff::tz::TimeZone::get(&cal.time_zone).is_err() {
        let name = cal.time_zone.clone();
        c.push("calendar.time_zone", Problem::UnknownTimeZone { name });
    }
}

/// A request costing more than the capacity could never be admitted: refuse the
/// document rather than deny such requests forever.
fn check_capacity(p: &Policy, c: &mut Collector) {
    let Some(capacity) = p.capacity() else { return };
    if capacity == 0 {
        return; // already reported as not positive
    }
    let (cost, cost_field) = p.largest_cost();
    if cost <= capacity {
        return;
    }
    let field = match p.algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra if p.burst.is_some() => "burst",
        Algorithm::TokenBucket | Algorithm::Gcra => "rate.units (the default burst)",
        Algorithm::FixedWindow | Algorithm::SlidingWindow => "rate.units",
        Algorithm::CalendarQuota => "calendar.units",
        Algorithm::Concurrency => "concurrency.max_in_flight",
    };
    let problem = Problem::BelowLargestCost {
        value: capacity,
        cost,
        cost_field,
    };
    c.push(field, problem);
}

fn check_failure(p: &Policy, c: &mut Collector) {
    let restricted = p.failure.mode == FailureMode::Restricted;
    let when = || "failure.mode is restricted".to_owned();
    match (&p.failure.rate, restricted) {
        (Some(rate), true) => {
            check_rate("failure.rate", rate, c);
            check_emergency_rate(p, rate, c);
        }
        (None, true) => c.push("failure.rate", Problem::Required { when: when() }),
        (Some(_), false) => c.push("failure.rate", Problem::NotUsed { when: not(when()) }),
        (None, false) => {}
    }
    match (p.failure.min_priority, restricted) {
        (None, true) => c.push("failure.min_priority", Problem::Required { when: when() }),
        (Some(_), false) => {
            let problem = Problem::NotUsed { when: not(when()) };
            c.push("failure.min_priority", problem);
        }
        _ => {}
    }
}

/// The emergency rate is a local fallback; it must not exceed the policy's own rate,
/// or losing the upstream would raise the limit.
fn check_emergency_rate(p: &Policy, emergency: &RateSpec, c: &mut Collector) {
    let Some(rate) = p.rate.filter(|r| r.per.as_ns() > 0) else {
        return;
    };
    if emergency.per.as_ns() == 0 {
        return;
    }
    let lhs = u128::from(emergency.units) * u128::from(rate.per.as_ns());
    let rhs = u128::from(rate.units) * u128::from(emergency.per.as_ns());
    if lhs > rhs {
        let problem = Problem::Exceeds {
            value: format!("{}/{}", emergency.units, emergency.per),
            limit: format!("the policy rate {}/{}", rate.units, rate.per),
        };
        c.push("failure.rate", problem);
    }
}

fn not(when: String) -> String {
    when.replace(" is ", " is not ")
}

fn check_lease(p: &Policy, c: &mut Collector) {
    let l = &p.lease;
    if l.ttl < LEASE_TTL_MIN || l.ttl > LEASE_TTL_MAX {
        let range = format!("[{LEASE_TTL_MIN}, {LEASE_TTL_MAX}]");
        c.push("lease.ttl", out_of_range(l.ttl, range));
    }
    if l.refresh_horizon.as_ns() == 0 {
        c.push("lease.refresh_horizon", Problem::MustBePositive);
    } else if l.refresh_horizon >= l.ttl {
        let problem = Problem::Exceeds {
            value: l.refresh_horizon.to_string(),
            limit: format!("lease.ttl {} (it must be shorter)", l.ttl),
        };
        c.push("lease.refresh_horizon", problem);
    }
    if l.reserve_fraction.0 >= PPM_ONE {
        c.push(
            "lease.reserve_fraction",
            out_of_range(l.reserve_fraction, "[0, 1)"),
        );
    }
    if l.min_credit == 0 {
        c.push("lease.min_credit", Problem::MustBePositive);
    }
    if let Some(max) = l.max_credit {
        if max < l.min_credit {
            let range = format!("[lease.min_credit {}, capacity]", l.min_credit);
            c.push("lease.max_credit", out_of_range(max, range));
        }
    }
    let Some(capacity) = p.capacity().filter(|cap| *cap > 0) else {
        return;
    };
    for (field, value) in [
        ("min_credit", Some(l.min_credit)),
        ("max_credit", l.max_credit),
    ] {
        if let Some(v) = value.filter(|v| *v > capacity) {
            let problem = Problem::Exceeds {
                value: v.to_string(),
                limit: format!("the policy's capacity {capacity}"),
            };
            c.push(format!("lease.{field}"), problem);
        }
    }
}

fn check_priority_classes(p: &Policy, c: &mut Collector) {
    let classes = &p.priority_classes;
    if classes.len() > PRIORITY_CLASSES_MAX {
        c.push(
            "priority_classes",
            too_many(classes.len(), PRIORITY_CLASSES_MAX),
        );
    }
    let mut names = BTreeSet::new();
    let mut priorities = BTreeSet::new();
    for (i, class) in classes.iter().enumerate() {
        let at = format!("priority_classes[{i}]");
        if !is_valid_policy_id(&class.name) {
            c.push(format!("{at}.name"), bad_name(&class.name, ID_RULE));
        } else if !names.insert(class.name.as_str()) {
            c.push(format!("{at}.name"), duplicate(&class.name));
        }
        if !priorities.insert(class.priority) {
            c.push(
                format!("{at}.priority"),
                duplicate(&class.priority.to_string()),
            );
        }
        if class.weight == 0 || class.weight > PRIORITY_WEIGHT_MAX {
            let range = format!("[1, {PRIORITY_WEIGHT_MAX}]");
            c.push(format!("{at}.weight"), out_of_range(class.weight, range));
        }
    }
}

fn bad_name(value: &str, rule: &'static str) -> Problem {
    Problem::BadName {
        value: value.to_owned(),
        rule,
    }
}

fn duplicate(value: &str) -> Problem {
    Problem::Duplicate {
        value: value.to_owned(),
    }
}

fn not_canonical(value: &str, why: String) -> Problem {
    Problem::NotCanonical {
        value: value.to_owned(),
        why,
    }
}

fn out_of_range(value: impl ToString, range: impl Into<String>) -> Problem {
    Problem::OutOfRange {
        value: value.to_string(),
        range: range.into(),
    }
}

fn too_many(found: usize, max: usize) -> Problem {
    Problem::TooMany { found, max }
}

fn too_long(len: usize, max: usize) -> Problem {
    Problem::TooLong { len, max }
}
