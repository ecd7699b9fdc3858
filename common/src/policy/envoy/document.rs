//! An envoyproxy/ratelimit domain stored at the allocator as one policy document.
//!
//! `leasectl policy apply -f edge.yaml` recognises a file of that service by its shape (a
//! top-level `domain` or `descriptors`, and no `id`) and stores it as the document
//! `ratelimit-<domain>`, which carries the domain's YAML as written in its `ratelimit` field:
//!
//! ```yaml
//! id: ratelimit-edge
//! mode: shadow          # from `leasectl policy apply --shadow`
//! ratelimit: |
//!   domain: edge
//!   descriptors:
//!     - key: tenant
//!       rate_limit: { unit: minute, requests_per_unit: 5 }
//! ```
//!
//! The document is versioned, diffed, rolled back, shadowed and audited like any other. When
//! a version becomes effective, each limited rule becomes its own leased policy under the id
//! its mapping gives it (`envoy-<domain>-<keys>-<digest>`), in the allocator's ledger and in
//! every agent's rule set, so all agents spend one budget per rule.
//!
//! Besides `id` and `ratelimit` a document may set `description`, `scope` (`global`,
//! `region` or `cell`: which allocator owns every rule's budget), `failure`, `mode` (`shadow`
//! puts every rule in shadow mode), `effective_at` and `kill_switch`; they apply to every
//! rule. The fields that describe one limit are refused: each rule's limit is its
//! `rate_limit`.

use super::map::RuleTemplate;
use super::{EnvoyConfig, EnvoyError, Mapped, MappedRule};
use crate::policy::error::{Collector, Problem};
use crate::policy::{
    Algorithm, Cost, Enforcement, Failure, FailureMode, LeaseParams, Mode, Policy, PolicyError,
    Scope, POLICY_ID_LEN_MAX,
};
use serde::de::IgnoredAny;
use serde::Deserialize;

/// Start of the policy id a domain is stored under.
pub const DOCUMENT_ID_PREFIX: &str = "ratelimit-";
/// Longest domain that can name a document, in bytes.
pub const DOCUMENT_DOMAIN_LEN_MAX: usize = POLICY_ID_LEN_MAX - DOCUMENT_ID_PREFIX.len();
/// Longest envoyproxy/ratelimit YAML one document carries, in bytes. Stored, the text is
/// indented or escaped (at most doubling it), and the whole document must still be read back
/// within [`POLICY_YAML_LEN_MAX`](crate::policy::POLICY_YAML_LEN_MAX).
pub const RATELIMIT_LEN_MAX: usize = 96 * 1024;

const DOMAIN_RULE: &str = "use 1 to 54 of a-z, A-Z, 0-9, '-', '_' and '.' (the policy id is \
                           'ratelimit-' and the domain in lowercase, '_' and '.' as '-')";
const LIMIT_FIELD_WHEN: &str = "ratelimit is set (each rule's limit is its rate_limit)";

/// Only what tells the two kinds of document apart; everything else is ignored here.
#[derive(Deserialize)]
struct Shape {
    id: Option<IgnoredAny>,
    domain: Option<IgnoredAny>,
    descriptors: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct DomainOnly {
    #[serde(default)]
    domain: String,
}

/// Whether `text` is envoyproxy/ratelimit YAML rather than a policy document: a mapping with
/// `domain` or `descriptors` at its top and no `id`. Text that is not a YAML mapping is
/// neither, and is reported by the policy parser.
pub fn is_ratelimit_yaml(text: &str) -> bool {
    match serde_norway::from_str::<Shape>(text) {
        Ok(shape) => shape.id.is_none() && (shape.domain.is_some() || shape.descriptors.is_some()),
        Err(_) => false,
    }
}

/// The id of the document holding `domain`: `ratelimit-` and the domain, lowercase, with `_`
/// and `.` as `-`. `None` when no valid policy id can be made of it. Two domains that differ
/// only there (`a_b`, `a-b`) share an id; the allocator refuses the second.
pub fn document_id(domain: &str) -> Option<String> {
    if domain.is_empty() || domain.len() > DOCUMENT_DOMAIN_LEN_MAX {
        return None;
    }
    let mut id = String::with_capacity(DOCUMENT_ID_PREFIX.len() + domain.len());
    id.push_str(DOCUMENT_ID_PREFIX);
    for b in domain.bytes() {
        id.push(match b {
            b'a'..=b'z' | b'0'..=b'9' | b'-' => char::from(b),
            b'A'..=b'Z' => char::from(b.to_ascii_lowercase()),
            b'_' | b'.' => '-',
            _ => return None,
        });
    }
    Some(id)
}

/// A document's domain: its descriptor tree for matching, and its rules as policies.
#[derive(Clone, Debug)]
pub struct DomainRules {
    pub domain: String,
    /// The one domain, for [`EnvoyConfig::lookup`].
    pub config: EnvoyConfig,
    /// Every rule with a `rate_limit`, in file order.
    pub rules: Vec<MappedRule>,
}

impl DomainRules {
    /// The policies of the limited rules (unlimited and zero-limit rules have none: they are
    /// answered from the matched rule itself).
    pub fn policies(&self) -> impl Iterator<Item = (&str, &Policy)> + '_ {
        self.rules.iter().filter_map(|r| match &r.mapped {
            Ok(Mapped::Policy(p)) => Some((r.rule_id.as_str(), &**p)),
            _ => None,
        })
    }
}

impl RuleTemplate {
    /// What every rule of the domain document `doc` takes from it.
    pub fn of_document(doc: &Policy) -> RuleTemplate {
        RuleTemplate {
            shadow: doc.mode == Mode::Shadow,
            kill_switch: doc.kill_switch,
            failure: doc.failure.clone(),
            ..RuleTemplate::shared(doc.scope)
        }
    }
}

impl Policy {
    /// The document storing one envoyproxy/ratelimit file's domain, validated.
    pub fn from_ratelimit_yaml(text: &str) -> Result<Policy, PolicyError> {
        // The id follows from the domain; when there is none (or the text does not parse),
        // validation reports why, at the domain's field.
        let id = serde_norway::from_str::<DomainOnly>(text)
            .ok()
            .and_then(|d| document_id(&d.domain))
            .unwrap_or_default();
        let policy = blank(id, text.to_owned());
        policy.validate().map_err(PolicyError::Invalid)?;
        Ok(policy)
    }

    /// The domain of a document with `ratelimit`, parsed and mapped; `None` for any other
    /// policy. Errors only for a document that never passed validation.
    pub fn domain_rules(&self) -> Option<Result<DomainRules, EnvoyError>> {
        let text = self.ratelimit.as_deref()?;
        Some(domain_rules(self, text))
    }
}

fn domain_rules(doc: &Policy, text: &str) -> Result<DomainRules, EnvoyError> {
    let config = EnvoyConfig::from_yaml(&format!("policy {}", doc.id), text)?;
    let domain = config.domains().next().unwrap_or_default().to_owned();
    let rules = config.to_policies(&RuleTemplate::of_document(doc));
    Ok(DomainRules {
        domain,
        config,
        rules,
    })
}

/// A document with `ratelimit` and every other field at its default.
fn blank(id: String, text: String) -> Policy {
    Policy {
        id,
        description: String::new(),
        dimensions: Vec::new(),
        key: Vec::new(),
        cost: Cost::default(),
        algorithm: Algorithm::default(),
        rate: None,
        burst: None,
        calendar: None,
        concurrency: None,
        scope: Scope::default(),
        enforcement: Enforcement::default(),
        failure: Failure::default(),
        mode: Mode::default(),
        effective_at: None,
        kill_switch: false,
        shape: None,
        lease: LeaseParams::default(),
        priority_classes: Vec::new(),
        ratelimit: Some(text),
    }
}

/// The rules of a document with `ratelimit` (`text`), beyond its description and failure
/// behaviour: the fields of one limit are unset, the domain names the id, the YAML loads and
/// every rule maps onto a valid policy. Problems inside the YAML are reported at
/// `ratelimit.<path in the file>`.
pub(crate) fn check(p: &Policy, text: &str, c: &mut Collector) {
    check_limit_fields(p, c);
    if p.scope == Scope::Process {
        c.push(
            "scope",
            Problem::Unsupported {
                value: "scope process".into(),
                when: "for an envoyproxy/ratelimit domain stored at the allocator".into(),
                instead: "its rules are shared by every agent; to enforce them in one process \
                          alone run leasehold-agent --standalone --ratelimit-config FILE"
                    .into(),
            },
        );
    }
    if p.failure.mode == FailureMode::Restricted {
        c.push(
            "failure.mode",
            Problem::Unsupported {
                value: "restricted".into(),
                when: "with ratelimit".into(),
                instead: "its emergency rate is one limit's; use fail_closed, cached_lease or \
                          fail_open"
                    .into(),
            },
        );
    }
    if text.len() > RATELIMIT_LEN_MAX {
        let problem = Problem::TooLong {
            len: text.len(),
            max: RATELIMIT_LEN_MAX,
        };
        return c.push("ratelimit", problem);
    }
    let rules = match domain_rules(p, text) {
        Ok(rules) => rules,
        Err(e) => return push_load_errors(e, c),
    };
    match document_id(&rules.domain) {
        None => c.push(
            "ratelimit.domain",
            Problem::DomainId {
                domain: rules.domain.clone(),
                rule: DOMAIN_RULE,
            },
        ),
        Some(expected) if expected != p.id => c.push(
            "id",
            Problem::MustBe {
                value: p.id.clone(),
                expected,
                why: format!("the id of envoyproxy/ratelimit domain '{}'", rules.domain),
            },
        ),
        Some(_) => {}
    }
    for rule in rules.rules {
        if let Err(e) = rule.mapped {
            c.push(format!("ratelimit.{}", rule.at), Problem::RatelimitRule(e));
        }
    }
}

fn check_limit_fields(p: &Policy, c: &mut Collector) {
    let set = [
        ("dimensions", !p.dimensions.is_empty()),
        ("key", !p.key.is_empty()),
        ("cost", p.cost != Cost::default()),
        ("algorithm", p.algorithm != Algorithm::default()),
        ("rate", p.rate.is_some()),
        ("burst", p.burst.is_some()),
        ("calendar", p.calendar.is_some()),
        ("concurrency", p.concurrency.is_some()),
        ("enforcement", p.enforcement != Enforcement::default()),
        ("lease", p.lease != LeaseParams::default()),
        ("priority_classes", !p.priority_classes.is_empty()),
    ];
    for (field, _) in set.into_iter().filter(|(_, set)| *set) {
        let when = LIMIT_FIELD_WHEN.to_owned();
        c.push(field, Problem::NotUsed { when });
    }
}

fn push_load_errors(e: EnvoyError, c: &mut Collector) {
    match e {
        EnvoyError::Invalid { errors, .. } => {
            for err in errors {
                c.push(
                    format!("ratelimit.{}", err.path),
                    Problem::Ratelimit(err.problem),
                );
            }
        }
        EnvoyError::Yaml { message, .. } => c.push("ratelimit", Problem::RatelimitYaml { message }),
        EnvoyError::FileTooLarge { len, max, .. } => {
            c.push("ratelimit", Problem::TooLong { len, max });
        }
        other => {
            let message = other.to_string();
            c.push("ratelimit", Problem::RatelimitYaml { message });
        }
    }
}
