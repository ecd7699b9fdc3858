//! The enforcer's bounded table of identities it tracks on their own keys.

use super::{GATE_IDLE_MS, GATE_KEYS_MAX, OVERFLOW_KEY, TENANT_POLICY};
use std::collections::BTreeMap;

#[derive(Default)]
pub struct Gate {
    last_seen_ms: BTreeMap<String, u64>,
    /// Identities charged to the overflow key because the table was full.
    pub aggregated: u64,
}

impl Gate {
    /// The key `identity`'s traffic is charged to: its own while the table has room (or it
    /// is already there), the overflow key otherwise.
    pub fn route(&mut self, identity: &str, now_ms: u64) -> String {
        if let Some(seen) = self.last_seen_ms.get_mut(identity) {
            *seen = now_ms;
            return format!("{TENANT_POLICY}:{identity}");
        }
        if self.last_seen_ms.len() < GATE_KEYS_MAX {
            self.last_seen_ms.insert(identity.to_string(), now_ms);
            return format!("{TENANT_POLICY}:{identity}");
        }
        self.aggregated += 1;
        OVERFLOW_KEY.to_string()
    }

    /// Forgets identities idle for [`GATE_IDLE_MS`].
    pub fn expire(&mut self, now_ms: u64) {
        self.last_seen_ms
            .retain(|_, seen| now_ms.saturating_sub(*seen) < GATE_IDLE_MS);
    }

    /// True while the table tracks the identity behind `key`.
    pub fn tracks_key(&self, key: &str) -> bool {
        key.strip_prefix(TENANT_POLICY)
            .and_then(|k| k.strip_prefix(':'))
            .is_some_and(|id| self.last_seen_ms.contains_key(id))
    }

    pub fn len(&self) -> usize {
        self.last_seen_ms.len()
    }
}
