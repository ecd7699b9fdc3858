//! The policy a descriptor's `limit` (Envoy's `RateLimitOverride`) is counted under.
//!
//! That service applies an override to any descriptor of a domain it knows, whatever rule
//! the entries match: a plain limit with no name, never in shadow mode, replacing nothing,
//! counted per descriptor value. Here each distinct override (domain, entry keys in order,
//! unit and limit) becomes a fixed-window policy keyed on the entries' values, one value a
//! dimension named by position: entry keys need not be dimension names.

use super::map::{verbatim_dimension, window_policy, MapError, Mapped, RuleTemplate};
use super::EnvoyLimit;
use crate::policy::DIMENSIONS_MAX;
use ring::digest;

/// Dimension names of an override's key, by entry position.
pub const OVERRIDE_DIMENSIONS: [&str; DIMENSIONS_MAX] =
    ["e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7"];
/// Hex digits of the digest of domain and entry keys in an override's policy id.
const ID_HASH_HEX_LEN: usize = 16;

/// The policy counting `limit` for descriptors of `domain` whose entries have the keys
/// `keys`, in order. A limit of 0 admits nothing and becomes no policy.
pub fn override_policy(
    domain: &str,
    keys: &[&str],
    limit: EnvoyLimit,
    template: &RuleTemplate,
) -> Result<Mapped, MapError> {
    if limit.requests_per_unit == 0 {
        return Ok(Mapped::AlwaysOverLimit);
    }
    if keys.len() > DIMENSIONS_MAX {
        return Err(MapError::TooManyDimensions {
            found: keys.len(),
            max: DIMENSIONS_MAX,
        });
    }
    let dimensions = OVERRIDE_DIMENSIONS[..keys.len()]
        .iter()
        .map(|name| verbatim_dimension((*name).to_owned()))
        .collect();
    let description = format!(
        "envoyproxy/ratelimit limit override in domain {domain}: {} per {} for entries {}",
        limit.requests_per_unit,
        limit.unit.name(),
        keys.join(", ")
    );
    let id = override_policy_id(domain, keys, limit);
    window_policy(id, description, dimensions, limit, false, template)
}

/// `envoy-override-<limit>-per-<unit>-<digest>`: readable limit and unit, and a SHA-256 of
/// domain and keys (each length-prefixed, so no two lists share one) to tell overrides apart.
pub fn override_policy_id(domain: &str, keys: &[&str], limit: EnvoyLimit) -> String {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for part in std::iter::once(domain).chain(keys.iter().copied()) {
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    let mut id = format!(
        "envoy-override-{}-per-{}-",
        limit.requests_per_unit,
        limit.unit.name()
    );
    for byte in &ctx.finish().as_ref()[..ID_HASH_HEX_LEN / 2] {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::envoy::EnvoyUnit;
    use crate::policy::{is_valid_policy_id, Algorithm, Scope};

    const LIMIT: EnvoyLimit = EnvoyLimit {
        requests_per_unit: 4_000_000_000,
        unit: EnvoyUnit::Minute,
    };

    fn policy(domain: &str, keys: &[&str], limit: EnvoyLimit) -> crate::policy::Policy {
        match override_policy(domain, keys, limit, &RuleTemplate::process()) {
            Ok(Mapped::Policy(p)) => *p,
            other => panic!("expected a policy, got {other:?}"),
        }
    }

    #[test]
    fn an_override_is_a_process_window_of_its_limit_keyed_by_position() {
        let p = policy("edge", &["remote_address", "path"], LIMIT);
        assert!(is_valid_policy_id(&p.id), "{}", p.id);
        assert_eq!(p.algorithm, Algorithm::FixedWindow);
        assert_eq!(p.scope, Scope::Process);
        let rate = p.rate.expect("a rate");
        assert_eq!(
            (rate.units, rate.per.as_ns()),
            (4_000_000_000, 60_000_000_000)
        );
        let names: Vec<_> = p.dimensions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["e0", "e1"]);
    }

    #[test]
    fn ids_differ_by_domain_keys_order_unit_and_limit() {
        let base = override_policy_id("edge", &["a", "b"], LIMIT);
        let second = EnvoyLimit {
            unit: EnvoyUnit::Second,
            ..LIMIT
        };
        let one = EnvoyLimit {
            requests_per_unit: 1,
            ..LIMIT
        };
        let others = [
            override_policy_id("edgf", &["a", "b"], LIMIT),
            override_policy_id("edge", &["b", "a"], LIMIT),
            override_policy_id("edge", &["ab"], LIMIT),
            override_policy_id("edge", &["a", "b"], second),
            override_policy_id("edge", &["a", "b"], one),
        ];
        for other in others {
            assert_ne!(base, other);
        }
        assert_eq!(base, override_policy_id("edge", &["a", "b"], LIMIT));
    }

    #[test]
    fn a_zero_limit_admits_nothing_and_too_many_entries_are_named() {
        let zero = EnvoyLimit {
            requests_per_unit: 0,
            ..LIMIT
        };
        let mapped = override_policy("edge", &["a"], zero, &RuleTemplate::process());
        assert_eq!(mapped, Ok(Mapped::AlwaysOverLimit));
        let keys = ["k"; DIMENSIONS_MAX + 1];
        let err = override_policy("edge", &keys, LIMIT, &RuleTemplate::process()).unwrap_err();
        assert_eq!(
            err,
            MapError::TooManyDimensions {
                found: DIMENSIONS_MAX + 1,
                max: DIMENSIONS_MAX
            }
        );
    }
}
