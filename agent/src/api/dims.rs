//! Engine dimensions from the dimensions of an admission request, for the gRPC and the
//! HTTP admission APIs: the same checks in the same order, refusals in each API's own
//! field names.

use crate::engine::Dimension;
use thiserror::Error;

/// One dimension as a request states it. It must name exactly one target: a Leasehold
/// policy id or an Envoy rate-limit domain.
pub trait RequestDimension {
    /// The policy id, if the request names one.
    fn policy_id(&self) -> Option<&str>;
    /// The Envoy domain, if the request names one.
    fn domain(&self) -> Option<&str>;
    /// The descriptor's entries as `(key, value)`.
    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)>;
}

/// What one admission API accepts, and how its refusals name the target fields.
#[derive(Copy, Clone, Debug)]
pub struct DimensionRules {
    /// Dimensions accepted in one request.
    pub dimensions_max: usize,
    /// Entries accepted per dimension.
    pub entries_max: usize,
    /// What a dimension must name, in the API's own field names (the reason given when a
    /// dimension names both targets or neither).
    pub target_rule: &'static str,
}

/// Why the dimensions of a request were refused; the message names the offending field.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DimensionError {
    #[error("dimensions: give 1 to {max}")]
    Count { max: usize },
    #[error("dimensions[{index}].entries: at most {max}")]
    Entries { index: usize, max: usize },
    #[error("dimensions[{index}]: {rule}")]
    Target { index: usize, rule: &'static str },
}

impl DimensionRules {
    /// Refuses an empty request and one with more than `dimensions_max` dimensions.
    pub fn check_count(&self, count: usize) -> Result<(), DimensionError> {
        if count == 0 || count > self.dimensions_max {
            return Err(DimensionError::Count {
                max: self.dimensions_max,
            });
        }
        Ok(())
    }

    /// Checks `dims` (their number, then every dimension's entries, then every target) and
    /// hands the engine dimensions to `f`, which borrow from `dims`.
    pub fn with_dimensions<D: RequestDimension, T>(
        &self,
        dims: &[D],
        f: impl FnOnce(&[Dimension<'_>]) -> T,
    ) -> Result<T, DimensionError> {
        self.check_count(dims.len())?;
        let mut entries = Vec::with_capacity(dims.len());
        for (index, d) in dims.iter().enumerate() {
            let these = d.entries();
            if these.len() > self.entries_max {
                return Err(DimensionError::Entries {
                    index,
                    max: self.entries_max,
                });
            }
            entries.push(these.collect::<Vec<_>>());
        }
        let mut out = Vec::with_capacity(dims.len());
        for (index, (d, entries)) in dims.iter().zip(&entries).enumerate() {
            out.push(match (d.policy_id(), d.domain()) {
                (Some(policy_id), None) => Dimension::policy(policy_id, entries),
                (None, Some(domain)) => Dimension::envoy(domain, entries),
                _ => {
                    return Err(DimensionError::Target {
                        index,
                        rule: self.target_rule,
                    })
                }
            });
        }
        Ok(f(&out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Target;

    struct Dim {
        policy: Option<&'static str>,
        domain: Option<&'static str>,
        entries: Vec<(&'static str, &'static str)>,
    }

    impl RequestDimension for Dim {
        fn policy_id(&self) -> Option<&str> {
            self.policy
        }
        fn domain(&self) -> Option<&str> {
            self.domain
        }
        fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
            self.entries.iter().copied()
        }
    }

    const RULES: DimensionRules = DimensionRules {
        dimensions_max: 2,
        entries_max: 1,
        target_rule: "name one target",
    };

    fn dim(policy: Option<&'static str>, domain: Option<&'static str>, entries: usize) -> Dim {
        Dim {
            policy,
            domain,
            entries: vec![("tenant", "acme"); entries],
        }
    }

    fn refusal(dims: &[Dim]) -> String {
        RULES.with_dimensions(dims, |_| ()).unwrap_err().to_string()
    }

    #[test]
    fn builds_policy_and_envoy_dimensions_in_order() {
        let dims = [dim(Some("api"), None, 1), dim(None, Some("edge"), 0)];
        let targets = RULES
            .with_dimensions(&dims, |d| {
                assert_eq!(d[0].entries, &[("tenant", "acme")]);
                assert!(d[1].entries.is_empty());
                d.iter()
                    .map(|x| format!("{:?}", x.target))
                    .collect::<Vec<_>>()
            })
            .unwrap();
        let expected = [Target::Policy("api"), Target::Envoy { domain: "edge" }];
        assert_eq!(targets, expected.map(|t| format!("{t:?}")));
    }

    #[test]
    fn refusals_name_the_dimension_and_the_rule() {
        assert_eq!(refusal(&[]), "dimensions: give 1 to 2");
        let three: Vec<_> = (0..3).map(|_| dim(Some("api"), None, 0)).collect();
        assert_eq!(refusal(&three), "dimensions: give 1 to 2");
        let dims = [dim(Some("api"), None, 0), dim(Some("api"), Some("edge"), 0)];
        assert_eq!(refusal(&dims), "dimensions[1]: name one target");
        assert_eq!(
            refusal(&[dim(None, None, 0)]),
            "dimensions[0]: name one target"
        );
        // Entries are checked for every dimension before any target.
        let dims = [dim(None, None, 0), dim(Some("api"), None, 2)];
        assert_eq!(refusal(&dims), "dimensions[1].entries: at most 1");
    }
}
