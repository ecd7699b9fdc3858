//! The order in which keys waiting for a first lease are served (and, past the waiting
//! bound, shed from the back): keys asked for again before keys asked once, since a key
//! asked again while it waits is someone's traffic and a spray asks once; within each,
//! every source's oldest key before any source's second, and so on, so that one caller
//! spraying new keys takes its turn beside the others instead of ahead of them.

use crate::engine::AcquireRequest;
use leasehold_common::time::Nanos;
use std::collections::HashMap;

/// A key waiting for its first lease, and since when.
pub(super) type Waiting = (AcquireRequest, Nanos);

/// `waiting` in serving order.
pub(super) fn fair_order(waiting: Vec<Waiting>) -> Vec<Waiting> {
    let mut by_age: Vec<(bool, Waiting)> = waiting
        .into_iter()
        .map(|w| (w.0.slot.offered() <= 1, w))
        .collect();
    by_age.sort_by_key(|(once, (_, at))| (*once, *at));
    let mut turns: HashMap<(bool, u32), u64> = HashMap::new();
    let mut ranked: Vec<((bool, u64), Waiting)> = by_age
        .into_iter()
        .map(|(once, w)| {
            let turn = turns.entry((once, w.0.source)).or_default();
            let rank = *turn;
            *turn += 1;
            ((once, rank), w)
        })
        .collect();
    // Stable: within a rank, the oldest first.
    ranked.sort_by_key(|(key, _)| *key);
    ranked.into_iter().map(|(_, w)| w).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credit::CreditSlot;
    use std::sync::Arc;

    fn req(key: &str, source: u32, offered: u64) -> AcquireRequest {
        let slot = Arc::new(CreditSlot::new());
        slot.note_unspent(offered, 0);
        AcquireRequest {
            policy_id: "p".into(),
            policy_version: 1,
            key: key.into(),
            slot,
            priority: 0,
            source,
        }
    }

    #[test]
    fn sources_take_turns_and_repeated_keys_go_first() {
        let waiting = vec![
            (req("s1", 1, 1), Nanos(1)),
            (req("s2", 1, 1), Nanos(2)),
            (req("s3", 1, 1), Nanos(3)),
            (req("h1", 2, 1), Nanos(4)),
            (req("again", 1, 2), Nanos(5)),
            (req("h2", 2, 1), Nanos(6)),
        ];
        let order: Vec<String> = fair_order(waiting)
            .into_iter()
            .map(|(r, _)| r.key.to_string())
            .collect();
        assert_eq!(order, ["again", "s1", "h1", "s2", "h2", "s3"]);
    }
}
