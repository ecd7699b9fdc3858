//! Policy errors: each names the field path (`lease.ttl`, `dimensions[1].name`) and why.

use super::envoy::{EnvoyProblem, MapError};
use std::fmt;
use thiserror::Error;

/// Why a policy document was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PolicyError {
    /// The text is not YAML of the policy's shape: bad syntax, a wrong type, an unknown
    /// field or a missing one. The message carries the field path and the position.
    #[error("policy YAML: {0}")]
    Yaml(String),
    /// The document parsed but breaks one or more rules; every broken rule is listed.
    #[error("{0}")]
    Invalid(FieldErrors),
}

impl PolicyError {
    /// The broken rules, when the document parsed.
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            PolicyError::Invalid(errors) => &errors.0,
            PolicyError::Yaml(_) => &[],
        }
    }
}

/// Every rule a document breaks, in document order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldErrors {}

/// One broken rule at one field.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{path}: {problem}")]
pub struct FieldError {
    /// Dotted path with list indices, as in `dimensions[0].max_len`.
    pub path: String,
    pub problem: Problem,
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Problem {
    #[error("must be positive")]
    MustBePositive,
    #[error("{value} is outside {range}")]
    OutOfRange { value: String, range: String },
    #[error("required when {when}")]
    Required { when: String },
    #[error("not used when {when}")]
    NotUsed { when: String },
    #[error("{value} is below the largest cost {cost} ({cost_field})")]
    BelowLargestCost {
        value: u64,
        cost: u64,
        cost_field: String,
    },
    #[error("{value} exceeds {limit}")]
    Exceeds { value: String, limit: String },
    #[error("'{value}' is not a valid name: {rule}")]
    BadName { value: String, rule: &'static str },
    #[error("'{value}' appears more than once")]
    Duplicate { value: String },
    #[error("'{name}' is not a declared dimension")]
    UnknownDimension { name: String },
    #[error("dimension '{name}' is declared but not in key")]
    DimensionNotInKey { name: String },
    #[error("unknown time zone '{name}'")]
    UnknownTimeZone { name: String },
    #[error("{found} entries, at most {max} allowed")]
    TooMany { found: usize, max: usize },
    #[error("{len} bytes, at most {max} allowed")]
    TooLong { len: usize, max: usize },
    #[error("'{value}' is not canonical: {why}")]
    NotCanonical { value: String, why: String },
    #[error("{value} cannot be honoured {when}: {instead}")]
    Unsupported {
        value: String,
        when: String,
        instead: String,
    },
    #[error("'{value}' must be '{expected}', {why}")]
    MustBe {
        value: String,
        expected: String,
        why: String,
    },
    #[error("not envoyproxy/ratelimit YAML: {message}")]
    RatelimitYaml { message: String },
    #[error(transparent)]
    Ratelimit(EnvoyProblem),
    #[error("the rule cannot be enforced: {0}")]
    RatelimitRule(MapError),
    #[error("domain '{domain}' cannot name a policy: {rule}")]
    DomainId { domain: String, rule: &'static str },
}

/// Collects every broken rule instead of stopping at the first.
#[derive(Default)]
pub(crate) struct Collector {
    errors: Vec<FieldError>,
}

impl Collector {
    pub(crate) fn push(&mut self, path: impl Into<String>, problem: Problem) {
        self.errors.push(FieldError {
            path: path.into(),
            problem,
        });
    }

    pub(crate) fn finish(self) -> Result<(), FieldErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(FieldErrors(self.errors))
        }
    }
}
