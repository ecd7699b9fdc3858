//! Reader for envoyproxy/ratelimit configuration, so rules written for that service keep
//! working unchanged.
//!
//! One file holds one `domain` and a tree of `descriptors`:
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: remote_address          # matches any value of this key
//!     rate_limit: { unit: second, requests_per_unit: 10 }
//!   - key: remote_address
//!     value: 50.0.0.5              # a specific value wins over the key-only rule
//!     rate_limit: { unit: second, requests_per_unit: 0 }
//!   - key: path
//!     value: /files/*              # '*' matches any run of characters
//!     shadow_mode: true
//!     rate_limit: { unit: minute, requests_per_unit: 100, name: files }
//!   - key: tenant
//!     descriptors:                 # nested: the request's next entry is matched here
//!       - key: plan
//!         value: free
//!         rate_limit: { unit: day, requests_per_unit: 1000, replaces: [{ name: files }] }
//!   - key: health
//!     rate_limit: { unlimited: true }
//! ```
//!
//! Fields, as that service reads them: `key` (required, non-empty), `value` (optional),
//! `rate_limit` with `unit` (`second`, `minute`, `hour`, `day`, `week`, `month`, `year`,
//! any letter case), `requests_per_unit`, `unlimited` (then no `unit`), `name` and
//! `replaces: [{name}]` (non-empty names, not the rule's own); `shadow_mode`,
//! `quota_mode`, `metadata` (accepted, not used), `detailed_metric`, `value_to_metric`,
//! `share_threshold` (only on a wildcard value) and nested `descriptors`. Anything else is
//! refused. Two rules with the same key and value
//! at one level, or two files with one domain, are errors.
//!
//! **Matching** ([`EnvoyConfig::lookup`]) walks the request's descriptor entries in order,
//! one tree level per entry. At each level an entry picks the rule with the same key and
//! value; else the first rule (in file order) with the same key whose `*` pattern matches
//! the value; else the rule with the same key and no value. The walk stops when nothing
//! matches or the matched rule has no nested descriptors. A limit applies only when the
//! rule matched by the request's *last* entry has a `rate_limit`: a rule deeper or
//! shallower than the request is not used, and a request matching no rule is not limited.
//! Unlike that service, wildcards are matched on the value alone (it matches the joined
//! text `key_value`, which lets key `a`, value `b_c` collide with key `a_b`, value `c`).
//!
//! **Mapping** ([`EnvoyConfig::to_policies`]) turns each limited rule into a Leasehold
//! [`Policy`](super::Policy) with the `fixed_window` algorithm: that service counts
//! requests in fixed windows of one unit (a month is 30 days and a year 365, as there),
//! so a fixed window of the same length behaves the same at window edges, including the
//! up-to-double burst across a boundary that a token bucket would not allow.
//!
//! **Fleet-wide** ([`document`]): a domain's YAML applied at the allocator is stored as one
//! policy document, `ratelimit-<domain>`, whose rules map with scope `global`; every agent
//! then spends credit leased from the allocator's one budget per rule.

pub mod document;
mod load;
mod map;
mod overrides;
mod tree;

pub use document::{
    document_id, is_ratelimit_yaml, DomainRules, DOCUMENT_DOMAIN_LEN_MAX, DOCUMENT_ID_PREFIX,
    RATELIMIT_LEN_MAX,
};
pub use map::{MapError, Mapped, MappedRule, RuleTemplate};
pub use overrides::{override_policy, override_policy_id, OVERRIDE_DIMENSIONS};

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use thiserror::Error;
use tree::DomainTree;

/// Longest configuration file accepted, in bytes.
pub const ENVOY_FILE_LEN_MAX: usize = 1024 * 1024;
/// Most files (and so domains) in one configuration.
pub const ENVOY_FILES_MAX: usize = 1024;
/// Deepest descriptor nesting accepted.
pub const ENVOY_DEPTH_MAX: usize = 16;
/// Most descriptor rules in one domain.
pub const ENVOY_RULES_MAX: usize = 10_000;

/// A time unit of that service; the window length is fixed (no calendar months).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EnvoyUnit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl EnvoyUnit {
    /// Reads a unit name in any letter case, as that service does.
    pub fn parse(name: &str) -> Option<EnvoyUnit> {
        const ALL: [EnvoyUnit; 7] = [
            EnvoyUnit::Second,
            EnvoyUnit::Minute,
            EnvoyUnit::Hour,
            EnvoyUnit::Day,
            EnvoyUnit::Week,
            EnvoyUnit::Month,
            EnvoyUnit::Year,
        ];
        ALL.into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            EnvoyUnit::Second => "second",
            EnvoyUnit::Minute => "minute",
            EnvoyUnit::Hour => "hour",
            EnvoyUnit::Day => "day",
            EnvoyUnit::Week => "week",
            EnvoyUnit::Month => "month",
            EnvoyUnit::Year => "year",
        }
    }

    /// Window length in seconds.
    pub fn seconds(self) -> u64 {
        const DAY: u64 = 86_400;
        match self {
            EnvoyUnit::Second => 1,
            EnvoyUnit::Minute => 60,
            EnvoyUnit::Hour => 3_600,
            EnvoyUnit::Day => DAY,
            EnvoyUnit::Week => 7 * DAY,
            EnvoyUnit::Month => 30 * DAY,
            EnvoyUnit::Year => 365 * DAY,
        }
    }
}

/// `requests_per_unit` requests per `unit`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct EnvoyLimit {
    pub requests_per_unit: u32,
    pub unit: EnvoyUnit,
}

/// The rule a request's descriptor matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchedRule {
    /// Stable path of the rule: `domain:key=value/key`, parts encoded as in
    /// [`crate::key`] (`*` is kept as is).
    pub rule_id: String,
    pub domain: String,
    /// `None` for an unlimited rule.
    pub limit: Option<EnvoyLimit>,
    pub name: Option<String>,
    pub shadow_mode: bool,
    /// Over its limit, this rule alone does not refuse the request: only when every quota
    /// rule a request matched is over (and no other rule refuses) is it refused.
    pub quota_mode: bool,
    /// Never limited.
    pub unlimited: bool,
    /// Names of rules this one replaces when both apply to one request.
    pub replaces: Vec<String>,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
}

/// Every loaded domain. Cloning shares the domains' rules.
#[derive(Clone, Debug, Default)]
pub struct EnvoyConfig {
    domains: BTreeMap<String, Arc<DomainTree>>,
}

/// A configuration problem at one field of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvoyFieldError {
    /// As in `descriptors[0].descriptors[2].rate_limit.unit`.
    pub path: String,
    pub problem: EnvoyProblem,
}

impl fmt::Display for EnvoyFieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EnvoyProblem {
    #[error("must not be empty")]
    Empty,
    #[error("invalid rate limit unit '{unit}' (expected second, minute, hour, day, week, month or year)")]
    InvalidUnit { unit: String },
    #[error("must not be set when unlimited is true")]
    UnitWithUnlimited,
    #[error("'{name}' is the rule's own name")]
    ReplacesItself { name: String },
    #[error("duplicate rule for key '{key}'{value}")]
    DuplicateRule { key: String, value: String },
    #[error("only allowed on a wildcard value (containing '*')")]
    ShareThresholdWithoutWildcard,
    #[error("nesting deeper than {max} levels")]
    TooDeep { max: usize },
    #[error("more than {max} rules in one domain")]
    TooManyRules { max: usize },
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EnvoyError {
    #[error("{file}: {message}")]
    Yaml { file: String, message: String },
    #[error("{file}: {}", join(.errors))]
    Invalid {
        file: String,
        errors: Vec<EnvoyFieldError>,
    },
    #[error("domain '{domain}' is defined in both {first} and {second}")]
    DuplicateDomain {
        domain: String,
        first: String,
        second: String,
    },
    #[error("{file}: {len} bytes, at most {max} allowed")]
    FileTooLarge {
        file: String,
        len: usize,
        max: usize,
    },
    #[error("{found} configuration files, at most {max} allowed")]
    TooManyFiles { found: usize, max: usize },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

fn join(errors: &[EnvoyFieldError]) -> String {
    let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    parts.join("; ")
}

impl EnvoyConfig {
    /// Reads one file's text (one domain); `file` names it in errors.
    pub fn from_yaml(file: &str, text: &str) -> Result<EnvoyConfig, EnvoyError> {
        EnvoyConfig::from_files([(file, text)])
    }

    /// Reads several files' texts, one domain each. A domain defined twice is an error
    /// naming both files.
    pub fn from_files<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<EnvoyConfig, EnvoyError> {
        let mut config = EnvoyConfig::default();
        for (count, (file, text)) in files.into_iter().enumerate() {
            if count >= ENVOY_FILES_MAX {
                return Err(EnvoyError::TooManyFiles {
                    found: count + 1,
                    max: ENVOY_FILES_MAX,
                });
            }
            let tree = load::parse_file(file, text)?;
            config.insert(Arc::new(tree))?;
        }
        Ok(config)
    }

    /// Adds every domain of `other`; a domain both hold is an error naming where each came
    /// from, and then nothing is added.
    pub fn merge(&mut self, other: &EnvoyConfig) -> Result<(), EnvoyError> {
        if let Some((domain, tree)) = other
            .domains
            .iter()
            .find(|(d, _)| self.domains.contains_key(*d))
        {
            return Err(EnvoyError::DuplicateDomain {
                domain: domain.clone(),
                first: self.domains[domain].file().to_owned(),
                second: tree.file().to_owned(),
            });
        }
        for tree in other.domains.values() {
            self.domains
                .insert(tree.domain().to_owned(), Arc::clone(tree));
        }
        Ok(())
    }

    fn insert(&mut self, tree: Arc<DomainTree>) -> Result<(), EnvoyError> {
        if let Some(existing) = self.domains.get(tree.domain()) {
            return Err(EnvoyError::DuplicateDomain {
                domain: tree.domain().to_owned(),
                first: existing.file().to_owned(),
                second: tree.file().to_owned(),
            });
        }
        self.domains.insert(tree.domain().to_owned(), tree);
        Ok(())
    }

    /// Reads every `*.yaml` and `*.yml` file directly in `dir`, in file-name order.
    /// This is the only function here that touches the file system.
    pub fn load_dir(dir: &std::path::Path) -> Result<EnvoyConfig, EnvoyError> {
        let texts = load::read_dir(dir)?;
        EnvoyConfig::from_files(texts.iter().map(|(f, t)| (f.as_str(), t.as_str())))
    }

    /// The rule that limits a request with these descriptor entries in `domain`, if any.
    /// Allocates nothing.
    pub fn lookup(&self, domain: &str, entries: &[(&str, &str)]) -> Option<&MatchedRule> {
        self.domains.get(domain)?.lookup(entries)
    }

    /// Whether `domain` is loaded.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Loaded domain names, sorted.
    pub fn domains(&self) -> impl Iterator<Item = &str> + '_ {
        self.domains.keys().map(String::as_str)
    }

    /// Every rule with a `rate_limit`, mapped onto Leasehold policies that take what the
    /// rules do not say from `template`, by domain then file order.
    pub fn to_policies(&self, template: &RuleTemplate) -> Vec<MappedRule> {
        self.domains
            .values()
            .flat_map(|tree| map::map_domain(tree, template))
            .collect()
    }
}
