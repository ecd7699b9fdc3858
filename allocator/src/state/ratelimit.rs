//! envoyproxy/ratelimit domains stored as policy documents: each effective version puts
//! every limited rule into the ledger as its own policy, and takes out the rules the
//! version before had and this one dropped.
//!
//! A rule's policy carries the document's version, so the ledger tells which version put
//! it there; that is how the rules of the version before are found without keeping a list
//! of them in the replicated state.

use super::{AdminError, AllocatorState, ShadowTally};
use leasehold_common::ledger::{Command, PolicyParams};
use leasehold_common::policy::envoy::DomainRules;
use leasehold_common::policy::Policy;
use leasehold_common::time::Nanos;
use std::collections::BTreeSet;

/// Start of the ids mapped rules get; other documents may not take them.
const RULE_ID_PREFIX: &str = "envoy-";

/// The rules of a domain document, parsed; `None` for other policies and for a document
/// that does not parse (it never passed validation, and so was never stored).
fn rules_of(doc: &Policy) -> Option<DomainRules> {
    doc.domain_rules()?.ok()
}

/// The ledger policies `policy` stands for: its own id, or each limited rule's of a
/// domain document.
pub fn ledger_policy_ids(policy: &Policy) -> BTreeSet<String> {
    if policy.ratelimit.is_some() {
        rule_ids(policy)
    } else {
        BTreeSet::from([policy.id.clone()])
    }
}

/// Ledger policy ids of the limited rules of `doc`.
fn rule_ids(doc: &Policy) -> BTreeSet<String> {
    rules_of(doc).map_or_else(BTreeSet::new, |rules| {
        rules.policies().map(|(_, p)| p.id.clone()).collect()
    })
}

impl AllocatorState {
    /// Puts the rules of version `version` of domain document `doc_id` into the ledger.
    pub(super) fn put_domain_rules(&mut self, doc_id: &str, version: u64, now: Nanos) {
        let Some(rules) = self
            .policies
            .get_version(doc_id, version)
            .ok()
            .and_then(|v| rules_of(&v.policy))
        else {
            return;
        };
        let mut params = Vec::new();
        for (_, policy) in rules.policies() {
            if let Ok(p) = PolicyParams::from_policy(policy, version) {
                params.push(p);
            }
        }
        let keep: BTreeSet<&str> = params.iter().map(|p| p.policy_id.as_str()).collect();
        for stale in self.stale_rules(doc_id, version, &keep) {
            // Leases out on a dropped rule run out normally; nothing grants it again.
            let _ = self.ledger.apply(
                now,
                Command::RemovePolicy {
                    policy_id: stale.clone(),
                },
            );
        }
        for p in params {
            // A stale or refused rule leaves the ledger on the rule's previous version.
            let _ = self.ledger.apply(now, Command::PutPolicy(p));
        }
    }

    /// Rules in the ledger from the version of `doc_id` in force before `version` that are
    /// not in `keep`. That version is the newest older one with a rule in the ledger under
    /// its own version number; versions that never took effect (replaced while pending) put
    /// nothing there and are passed over.
    fn stale_rules(&self, doc_id: &str, version: u64, keep: &BTreeSet<&str>) -> Vec<String> {
        let Some(history) = self.policies.history(doc_id) else {
            return Vec::new();
        };
        let older: Vec<_> = history.filter(|v| v.version < version).collect();
        for v in older.into_iter().rev() {
            let ids = rule_ids(&v.policy);
            let in_force: Vec<&String> = ids
                .iter()
                .filter(|id| {
                    self.ledger
                        .policy(id)
                        .is_some_and(|p| p.version == v.version)
                })
                .collect();
            if !in_force.is_empty() {
                return in_force
                    .into_iter()
                    .filter(|id| !keep.contains(id.as_str()))
                    .cloned()
                    .collect();
            }
        }
        Vec::new()
    }

    /// Refuses what storing `policy` would break: a domain taking the id of another domain
    /// or of a plain policy (and the reverse), a plain policy taking a mapped rule's id, or
    /// more rules than the ledger holds.
    pub fn check_document(&self, policy: &Policy) -> Result<(), AdminError> {
        let current = self.policies.get(&policy.id).map(|v| &v.policy);
        let new_rules = rules_of(policy);
        match (current, &new_rules) {
            (None, None) if policy.id.starts_with(RULE_ID_PREFIX) => {
                return Err(AdminError::Invalid(format!(
                    "policy id '{}': ids starting with '{RULE_ID_PREFIX}' are kept for the \
                     policies of envoyproxy/ratelimit rules",
                    policy.id
                )))
            }
            (Some(cur), new) => {
                let old_domain = rules_of(cur).map(|r| r.domain);
                let new_domain = new.as_ref().map(|r| r.domain.clone());
                if old_domain != new_domain {
                    let what = |d: &Option<String>| match d {
                        Some(d) => format!("envoyproxy/ratelimit domain '{d}'"),
                        None => "a policy document".to_owned(),
                    };
                    return Err(AdminError::Refused(format!(
                        "policy '{}' holds {}; it cannot become {}",
                        policy.id,
                        what(&old_domain),
                        what(&new_domain)
                    )));
                }
            }
            _ => {}
        }
        let Some(rules) = new_rules else {
            return Ok(());
        };
        let max = self.ledger.config().limits.policies_max;
        let held = self.ledger.policies().count();
        let added = rules
            .policies()
            .filter(|(_, p)| self.ledger.policy(&p.id).is_none())
            .count();
        if held + added > max {
            return Err(AdminError::Refused(format!(
                "domain '{}' adds {added} rule policies to the {held} held; the ledger holds \
                 at most {max}",
                rules.domain
            )));
        }
        Ok(())
    }

    /// Would-deny counts of `version` of a policy: for a domain document, the sum over
    /// its rules.
    pub fn shadow_tally(&self, policy_id: &str, version: u64) -> Option<ShadowTally> {
        let doc = self
            .policies
            .get_version(policy_id, version)
            .ok()
            .filter(|v| v.policy.ratelimit.is_some());
        let Some(doc) = doc else {
            return self.shadow.tally(policy_id, version).cloned();
        };
        let tallies: Vec<&ShadowTally> = rule_ids(&doc.policy)
            .iter()
            .filter_map(|id| self.shadow.tally(id, version))
            .collect();
        let since_ns = tallies.iter().map(|t| t.since_ns).min()?;
        Some(ShadowTally {
            version,
            would_deny_requests: tallies.iter().map(|t| t.would_deny_requests).sum(),
            since_ns,
        })
    }
}
