//! envoyproxy/ratelimit domains in a rule set: the local file's, enforced by this process
//! alone, and those of domain documents from the allocator, whose rules spend credit leased
//! under the same policy ids the allocator's ledger holds.

use super::rules::{compile, CompileAs, EngineError, RuleSet};
use leasehold_common::policy::envoy::{DomainRules, EnvoyConfig, Mapped, RuleTemplate};
use leasehold_common::policy::{Policy, PolicyVersion};
use std::sync::Arc;

/// A domain document's parsed rules, reused by later rule sets while the document does not
/// change (parsing is the costly part of installing it).
#[derive(Debug)]
pub(crate) struct DomainDocument {
    version: u64,
    policy: Policy,
    rules: DomainRules,
}

impl DomainDocument {
    /// `pv`'s rules, from `old` when it holds this very version.
    fn of(pv: &PolicyVersion, old: Option<&RuleSet>) -> Result<Arc<DomainDocument>, EngineError> {
        let id = &pv.policy.id;
        if let Some(doc) = old.and_then(|o| o.documents.get(id)) {
            if doc.version == pv.version && doc.policy == pv.policy {
                return Ok(Arc::clone(doc));
            }
        }
        let error = |error| EngineError::Document {
            id: id.clone(),
            error,
        };
        let rules = match pv.policy.domain_rules() {
            Some(rules) => rules.map_err(error)?,
            None => unreachable!("called for domain documents only"),
        };
        Ok(Arc::new(DomainDocument {
            version: pv.version,
            policy: pv.policy.clone(),
            rules,
        }))
    }
}

impl RuleSet {
    /// Adds the domain of document version `pv`: its tree for matching, and each limited
    /// rule as a policy of the document's version.
    pub(super) fn add_document(
        &mut self,
        pv: &PolicyVersion,
        old: Option<&RuleSet>,
        keys: CompileAs,
    ) -> Result<(), EngineError> {
        let doc = DomainDocument::of(pv, old)?;
        self.envoy.merge(&doc.rules.config)?;
        let mut indices = Vec::new();
        for (rule_id, policy) in doc.rules.policies() {
            let index = self.add(compile(policy, pv.version, old, keys)?)?;
            self.envoy_rules.insert(rule_id.to_owned(), index);
            indices.push(index);
        }
        self.document_rules.insert(pv.policy.id.clone(), indices);
        self.documents.insert(pv.policy.id.clone(), doc);
        Ok(())
    }

    /// Adds the domains of a local configuration file, enforced by this process alone.
    pub(super) fn add_local_envoy(
        &mut self,
        envoy: &EnvoyConfig,
        old: Option<&RuleSet>,
        keys: CompileAs,
    ) -> Result<(), EngineError> {
        self.envoy.merge(envoy)?;
        for rule in envoy.to_policies(&RuleTemplate::process()) {
            let policy = match rule.mapped {
                Ok(Mapped::Policy(policy)) => policy,
                // Answered from the matched rule itself on every request.
                Ok(Mapped::Unlimited | Mapped::AlwaysOverLimit) => continue,
                Err(error) => {
                    return Err(EngineError::EnvoyMap {
                        rule_id: rule.rule_id,
                        error,
                    })
                }
            };
            let compiled = compile(&policy, super::ENVOY_POLICY_VERSION, old, keys)?;
            let index = self.add(compiled)?;
            self.envoy_rules.insert(rule.rule_id, index);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineLimits;
    use crate::engine::RuleSource;
    use leasehold_common::policy::Scope;

    const EDGE: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";

    fn build(source: RuleSource, old: Option<&RuleSet>) -> RuleSet {
        let options = crate::engine::rules::RuleOptions::new(&EngineLimits::default(), true);
        RuleSet::build(source, old, &options, jiff::Timestamp::now()).unwrap()
    }

    fn only_policy(set: &RuleSet) -> (&str, Scope, u64) {
        assert_eq!(set.policies.len(), 1);
        let p = &set.policies[0];
        (&p.id, p.policy.scope, p.version)
    }

    /// A local file's rules stay in this process; a document's rules are the allocator's,
    /// under the same ids, so that their leases name policies its ledger knows.
    #[test]
    fn local_rules_are_process_scoped_and_document_rules_shared() {
        let local = build(
            RuleSource {
                policies: Vec::new(),
                envoy: Some(EnvoyConfig::from_yaml("edge.yaml", EDGE).unwrap()),
            },
            None,
        );
        let doc = PolicyVersion {
            version: 4,
            policy: Policy::from_yaml(EDGE).unwrap(),
            rolled_back_from: None,
        };
        let shared = build(RuleSource::from_policies([]).with(doc), None);
        let (local_id, local_scope, _) = only_policy(&local);
        let (shared_id, shared_scope, version) = only_policy(&shared);
        assert_eq!(local_id, shared_id);
        assert_eq!(local_scope, Scope::Process);
        assert_eq!((shared_scope, version), (Scope::Global, 4));
    }

    /// An unchanged document is not parsed again, and its rules keep their compiled state.
    #[test]
    fn an_unchanged_document_is_reused() {
        let doc = PolicyVersion {
            version: 1,
            policy: Policy::from_yaml(EDGE).unwrap(),
            rolled_back_from: None,
        };
        let first = build(RuleSource::from_policies([]).with(doc.clone()), None);
        let second = build(RuleSource::from_policies([]).with(doc), Some(&first));
        assert!(Arc::ptr_eq(
            &first.documents["ratelimit-edge"],
            &second.documents["ratelimit-edge"]
        ));
        assert!(Arc::ptr_eq(&first.policies[0], &second.policies[0]));
    }

    impl RuleSource {
        fn with(mut self, pv: PolicyVersion) -> RuleSource {
            self.policies.push(pv);
            self
        }
    }
}
