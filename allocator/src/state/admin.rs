//! Admin changes to the replicated state, each audited.

use super::records::{Emergency, Event, EventKind};
use super::{AllocatorState, Pending, PolicyMeta, StateCommand, StateOutput};
use leasehold_common::ledger::{Budget, Command, Outcome, Role};
use leasehold_common::policy::{diff, HumanDuration, Mode, Policy, PolicySetError, RateSpec};
use leasehold_common::time::Nanos;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why an admin change was refused; nothing was changed.
#[derive(Clone, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Refused(String),
}

/// Policies and rates of a delegated allocator are its upstream's to change.
pub(super) fn delegated_refusal() -> AdminError {
    AdminError::Refused(
        "this allocator is delegated: its policies and rates come from its upstream cluster; change them there".into(),
    )
}

fn from_set(e: PolicySetError) -> AdminError {
    match e {
        PolicySetError::UnknownPolicy { .. } | PolicySetError::VersionNotKept { .. } => {
            AdminError::NotFound(e.to_string())
        }
        PolicySetError::Invalid { .. } => AdminError::Invalid(e.to_string()),
        PolicySetError::TooManyPolicies { .. } => AdminError::Refused(e.to_string()),
    }
}

fn yaml_of(p: Option<&Policy>) -> String {
    p.and_then(|p| p.to_yaml().ok()).unwrap_or_default()
}

/// `policy` with its rate and burst replaced: whole units per second when the rate is exact
/// in them, otherwise the same rate per 1000 s, so no precision is lost.
pub(super) fn with_rate(policy: &Policy, rate_milli: u64, burst: u64) -> Policy {
    let mut policy = policy.clone();
    policy.rate = Some(if rate_milli.is_multiple_of(1_000) {
        RateSpec {
            units: rate_milli / 1_000,
            per: HumanDuration::from_secs(1),
        }
    } else {
        RateSpec {
            units: rate_milli,
            per: HumanDuration::from_secs(1_000),
        }
    });
    policy.burst = Some(burst);
    policy
}

/// A parsed document ready to apply: the shadow flag and effective time folded in.
pub fn prepare(yaml: &str, shadow: bool) -> Result<Policy, AdminError> {
    let mut policy = Policy::from_yaml(yaml).map_err(|e| AdminError::Invalid(e.to_string()))?;
    if shadow {
        policy.mode = Mode::Shadow;
    }
    Ok(policy)
}

impl AllocatorState {
    /// What applying `policy` would change, without changing anything.
    pub fn preview(&self, policy: &Policy) -> (u64, bool, String) {
        match self.policies.get(&policy.id) {
            Some(cur) => {
                let changes = diff(&cur.policy, policy);
                let text: Vec<String> = changes.iter().map(ToString::to_string).collect();
                let changed = !changes.is_empty();
                (cur.version + u64::from(changed), changed, text.join("\n"))
            }
            None => (1, true, format!("new policy {}", policy.id)),
        }
    }

    pub(super) fn apply_admin(&mut self, now: Nanos, cmd: StateCommand) -> StateOutput {
        let result = match cmd {
            StateCommand::ApplyPolicy { .. }
            | StateCommand::RollbackPolicy { .. }
            | StateCommand::SetRate { .. }
                if self.is_delegated() =>
            {
                Err(delegated_refusal())
            }
            StateCommand::Restore {
                backup,
                reason,
                actor,
            } => {
                return self.apply_restore(now, &backup, (&actor, &reason));
            }
            StateCommand::MirrorPolicy {
                yaml,
                upstream_version,
                actor,
            } => prepare(&yaml, false).and_then(|p| {
                let reason = format!("upstream version {upstream_version}");
                self.put(now, p, 0, (&actor, "policy.mirror"), &reason)
            }),
            StateCommand::ApplyPolicy {
                yaml,
                shadow,
                effective_at_ns,
                actor,
            } => prepare(&yaml, shadow)
                .and_then(|p| self.put(now, p, effective_at_ns, (&actor, "policy.apply"), "")),
            StateCommand::RollbackPolicy {
                policy_id,
                to_version,
                actor,
            } => self
                .policies
                .get_version(&policy_id, to_version)
                .map(|v| v.policy.clone())
                .map_err(from_set)
                .and_then(|p| self.put(now, p, 0, (&actor, "policy.rollback"), "")),
            StateCommand::SetRate {
                policy_id,
                rate_milli_per_sec,
                burst,
                actor,
            } => self.set_rate(now, &policy_id, rate_milli_per_sec, burst, &actor),
            StateCommand::SplitBudget {
                policy_id,
                weights,
                reserve_ppm,
                actor,
            } => self.split(now, policy_id, weights, reserve_ppm, &actor),
            StateCommand::Revoke {
                lease_id,
                reason,
                actor,
            } => self.revoke(now, lease_id, &reason, &actor),
            StateCommand::SetEmergency {
                emergency,
                reason,
                actor,
            } => Ok(self.set_emergency(now, emergency, &reason, &actor)),
            StateCommand::Ledger(_)
            | StateCommand::ShadowReport { .. }
            | StateCommand::CountedReport { .. }
            | StateCommand::CountedRelease { .. }
            | StateCommand::CountedAcquire { .. }
            | StateCommand::LeaseCalls(_) => {
                unreachable!("ledger commands are applied directly")
            }
        };
        result.unwrap_or_else(StateOutput::Refused)
    }

    pub(super) fn is_delegated(&self) -> bool {
        self.ledger.config().role == Role::Delegated
    }

    fn put(
        &mut self,
        now: Nanos,
        policy: Policy,
        effective_at_ns: u64,
        (actor, action): (&str, &str),
        reason: &str,
    ) -> Result<StateOutput, AdminError> {
        self.check_document(&policy)?;
        let id = policy.id.clone();
        let before = yaml_of(self.policies.get(&id).map(|v| &v.policy));
        let (_, _, diff_text) = self.preview(&policy);
        let from_doc = policy
            .effective_at
            .and_then(|t| u64::try_from(t.as_nanosecond()).ok())
            .unwrap_or(0);
        let applied = self.policies.apply(policy).map_err(from_set)?;
        if !applied.changed {
            return Ok(StateOutput::Policy {
                policy_id: id,
                version: applied.version,
                changed: false,
                diff: String::new(),
            });
        }
        let effective = if effective_at_ns > 0 {
            effective_at_ns
        } else {
            from_doc
        };
        self.meta.insert(
            id.clone(),
            PolicyMeta {
                updated_by: actor.to_string(),
                updated_at_ns: now.0,
                effective_at_ns: effective,
            },
        );
        if effective > now.0 {
            self.pending.insert(
                id.clone(),
                Pending {
                    version: applied.version,
                    effective_at_ns: effective,
                },
            );
        } else {
            self.pending.remove(&id);
            self.make_effective(&id, applied.version, now);
        }
        let after = yaml_of(self.policies.get(&id).map(|v| &v.policy));
        self.record(
            now,
            actor,
            action,
            &format!("policy/{id}"),
            (before, after),
            reason,
        );
        Ok(StateOutput::Policy {
            policy_id: id,
            version: applied.version,
            changed: true,
            diff: diff_text,
        })
    }

    fn set_rate(
        &mut self,
        now: Nanos,
        policy_id: &str,
        rate_milli: u64,
        burst: u64,
        actor: &str,
    ) -> Result<StateOutput, AdminError> {
        let current = &self
            .policies
            .get(policy_id)
            .ok_or_else(|| AdminError::NotFound(format!("no policy '{policy_id}'")))?
            .policy;
        let policy = with_rate(current, rate_milli, burst);
        self.put(now, policy, 0, (actor, "budget.set"), "")
    }

    fn split(
        &mut self,
        now: Nanos,
        policy_id: String,
        weights: std::collections::BTreeMap<String, u64>,
        reserve_ppm: Option<u64>,
        actor: &str,
    ) -> Result<StateOutput, AdminError> {
        let before = format!("{:?}", self.ledger.budget(&policy_id));
        let budget = Budget {
            policy_id: policy_id.clone(),
            weights,
            reserve_ppm,
        };
        let after = format!("{:?}", Some(&budget));
        self.ledger
            .apply(now, Command::SetBudget(budget))
            .map_err(|e| AdminError::Invalid(e.to_string()))?;
        self.record(
            now,
            actor,
            "budget.split",
            &format!("policy/{policy_id}"),
            (before, after),
            "",
        );
        Ok(StateOutput::Budget)
    }

    fn revoke(
        &mut self,
        now: Nanos,
        lease_id: u64,
        reason: &str,
        actor: &str,
    ) -> Result<StateOutput, AdminError> {
        let rec = self
            .ledger
            .lease(lease_id)
            .ok_or_else(|| AdminError::NotFound(format!("no live lease {lease_id}")))?;
        let (holder_id, outstanding, before) = (
            rec.lease.holder_id.clone(),
            rec.unspent(),
            format!("{:?}", rec.state),
        );
        match self.ledger.apply(now, Command::Revoke { lease_id }) {
            Ok(Outcome::Revoked { .. }) => {}
            other => {
                return Err(AdminError::Refused(format!(
                    "revoke lease {lease_id}: {other:?}"
                )))
            }
        }
        let reason_owned = reason.to_string();
        let holder = holder_id.clone();
        self.events.push(|seq| Event {
            seq,
            kind: EventKind::LeaseRevoked {
                lease_id,
                holder_id: holder,
                reason: reason_owned,
            },
        });
        self.record(
            now,
            actor,
            "lease.revoke",
            &format!("lease/{lease_id} holder/{holder_id}"),
            (before, "Revoked".into()),
            reason,
        );
        Ok(StateOutput::Revoked { outstanding })
    }

    fn set_emergency(
        &mut self,
        now: Nanos,
        emergency: Emergency,
        reason: &str,
        actor: &str,
    ) -> StateOutput {
        let id = emergency.policy_id.clone();
        let previous = self.emergency(&id);
        self.emergency.insert(id.clone(), emergency.clone());
        let after = format!("{emergency:?}");
        let watch_seq = self.events.push(|seq| Event {
            seq,
            kind: EventKind::Emergency(emergency),
        });
        self.record(
            now,
            actor,
            "emergency.set",
            &format!("policy/{id}"),
            (format!("{previous:?}"), after),
            reason,
        );
        StateOutput::Emergency {
            previous,
            watch_seq,
        }
    }
}
