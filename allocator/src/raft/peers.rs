//! The leader's view of each peer's replication: how far its log is known to match, and when
//! that last moved or caught up.
//!
//! openraft reports the matched log id per peer, not when a peer last answered. The leader
//! appends an expiry tick every `tick_ms`, so a peer that answers keeps advancing (or stays
//! equal to the leader's last index); the time of the last such observation is a faithful
//! "last contact", and a peer whose progress stalls shows a growing age.

use super::types::TypeConfig;
use openraft::Raft;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// One peer as the leader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerProgress {
    /// Highest log index known to match the leader's; `None` before the first answer.
    pub matched_index: Option<u64>,
    /// Milliseconds since the match last advanced or reached the leader's last index;
    /// `None` when never observed.
    pub contact_age_ms: Option<u64>,
}

#[derive(Default)]
pub struct PeerTracker {
    seen: Mutex<BTreeMap<u64, (Option<u64>, Instant)>>,
}

impl PeerTracker {
    /// Records a metrics observation: `replication` is the leader's matched index per peer
    /// (`None` when this node does not lead), `last_log_index` the leader's own.
    pub fn observe(
        &self,
        replication: Option<&BTreeMap<u64, Option<u64>>>,
        last_log_index: Option<u64>,
        now: Instant,
    ) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let Some(replication) = replication else {
            // Not leading: what we knew is stale and must not be reported as current.
            seen.clear();
            return;
        };
        seen.retain(|id, _| replication.contains_key(id));
        for (id, matched) in replication {
            let moved = match seen.get(id) {
                Some((before, _)) => before != matched,
                None => matched.is_some(),
            };
            let caught_up = matched.is_some() && *matched >= last_log_index;
            if moved || caught_up {
                seen.insert(*id, (*matched, now));
            } else {
                seen.entry(*id).or_insert((*matched, now));
            }
        }
    }

    /// Progress of `peer` at `now`; `None` when this node does not lead or never saw it.
    pub fn progress(&self, peer: u64, now: Instant) -> Option<PeerProgress> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (matched, at) = seen.get(&peer)?;
        Some(PeerProgress {
            matched_index: *matched,
            contact_age_ms: matched.map(|_| {
                u64::try_from(now.saturating_duration_since(*at).as_millis()).unwrap_or(u64::MAX)
            }),
        })
    }
}

/// Feeds every metrics change of `raft` to the peer tracker until the node stops.
pub(super) async fn track_peers(
    raft: Raft<TypeConfig>,
    peers: Arc<PeerTracker>,
    mut stop: watch::Receiver<bool>,
) {
    let mut metrics = raft.metrics();
    loop {
        {
            let m = metrics.borrow_and_update();
            let replication: Option<BTreeMap<u64, Option<u64>>> = m.replication.as_ref().map(|r| {
                r.iter()
                    .map(|(id, log)| (*id, log.map(|l| l.index)))
                    .collect()
            });
            peers.observe(
                replication.as_ref(),
                m.last_log_index,
                std::time::Instant::now(),
            );
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn repl(pairs: &[(u64, Option<u64>)]) -> BTreeMap<u64, Option<u64>> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn a_stalled_peer_ages_while_a_replicating_one_stays_fresh() {
        let t = PeerTracker::default();
        let t0 = Instant::now();
        t.observe(Some(&repl(&[(2, Some(10)), (3, Some(10))])), Some(10), t0);
        let t1 = t0 + Duration::from_millis(700);
        t.observe(Some(&repl(&[(2, Some(17)), (3, Some(10))])), Some(17), t1);
        assert_eq!(t.progress(2, t1).unwrap().contact_age_ms, Some(0));
        assert_eq!(t.progress(3, t1).unwrap().contact_age_ms, Some(700));
        assert_eq!(t.progress(3, t1).unwrap().matched_index, Some(10));
    }

    #[test]
    fn a_peer_that_never_answered_has_no_contact_and_losing_leadership_forgets() {
        let t = PeerTracker::default();
        let t0 = Instant::now();
        t.observe(Some(&repl(&[(2, None)])), Some(3), t0);
        assert_eq!(t.progress(2, t0).unwrap().contact_age_ms, None);
        t.observe(None, Some(3), t0);
        assert_eq!(t.progress(2, t0), None);
    }
}
