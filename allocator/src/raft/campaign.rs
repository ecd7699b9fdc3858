//! Elections this node starts itself, so a dead leader is replaced soon after the voters'
//! leader lease has run out, with a delay drawn afresh for every campaign.
//!
//! openraft 0.9 starts an election from its tick (every 1.5 × heartbeat) once
//! `leader_lease + T` has passed since the node's vote was last refreshed, where the lease is
//! `election_timeout_max` and T is drawn from `[election_timeout_min, election_timeout_max)`
//! once, when the node starts. So a failover waits for the lease, then T, then the next tick;
//! and two followers whose T lie close together campaign at the same moments round after
//! round and split the vote each time.
//!
//! The campaigner starts an election once this node has heard nothing from a leader (nor
//! from a candidate it voted for) for the lease plus a random delay below
//! `election_timeout_max − election_timeout_min`, and, while no leader has emerged since its
//! own campaign, again after a heartbeat period plus such a delay. The voters refuse a
//! campaign while their own lease on the old leader holds, so it cannot cut a live leader
//! short any more than openraft's timer does; electing at any moment is safe in Raft, the
//! delays only decide how soon and how often. openraft's own timer stays on: it still
//! starts a cluster whose nodes have heard from no one since they started.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::{Raft, ServerState};
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use super::config::NodeConfig;
use super::types::TypeConfig;

/// When this node last heard from a leader, granted a vote, or campaigned; the peers' Raft
/// calls this node answers refresh it.
#[derive(Debug, Default)]
pub(crate) struct Contact {
    last: Mutex<Option<Instant>>,
}

impl Contact {
    pub(crate) fn touch(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// None until the first contact since this node started.
    fn last(&self) -> Option<Instant> {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long the campaigner waits, derived from the node's Raft timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CampaignTimings {
    /// openraft's leader lease (`election_timeout_max`): a voter refuses any candidate
    /// until this long after it last heard from its leader.
    pub lease: Duration,
    /// Wait after a campaign that brought no leader: enough for the vote calls to be
    /// answered on a healthy network (one heartbeat period).
    pub retry: Duration,
    /// Random delay added to each wait, drawn anew each time: two nodes that campaigned
    /// together are unlikely to do so again.
    pub spread: Duration,
}

impl CampaignTimings {
    pub(crate) fn of(config: &NodeConfig) -> Self {
        CampaignTimings {
            lease: Duration::from_millis(config.election_timeout_max_ms),
            retry: Duration::from_millis(config.heartbeat_interval_ms),
            spread: Duration::from_millis(
                config
                    .election_timeout_max_ms
                    .saturating_sub(config.election_timeout_min_ms),
            ),
        }
    }

    /// How long after the last contact to campaign: past the lease while this node's vote
    /// is for a leader it heard from, else (it campaigned, or voted for a candidate that
    /// has not won yet) a retry period; plus `jitter`.
    fn wait(&self, vote_committed: bool, jitter: Duration) -> Duration {
        let base = if vote_committed {
            self.lease
        } else {
            self.retry
        };
        base + jitter
    }

    fn draw(&self) -> Duration {
        let spread_us = self.spread.as_micros() as u64;
        Duration::from_micros(rand::rng().random_range(0..=spread_us))
    }
}

/// Whether a node in `state` may campaign: a leader need not, a learner cannot.
fn may_campaign(state: ServerState) -> bool {
    matches!(state, ServerState::Follower | ServerState::Candidate)
}

/// Starts elections for `raft` as the module describes until `stop` turns true.
pub(crate) async fn run_campaigner(
    raft: Raft<TypeConfig>,
    contact: Arc<Contact>,
    timings: CampaignTimings,
    mut stop: watch::Receiver<bool>,
) {
    let metrics = raft.metrics();
    let mut jitter = timings.draw();
    loop {
        let (state, committed) = {
            let m = metrics.borrow();
            (m.state, m.vote.is_committed())
        };
        let due = contact
            .last()
            .map(|last| last + timings.wait(committed, jitter));
        let now = Instant::now();
        let ready = may_campaign(state) && due.is_some_and(|due| due <= now);
        if !ready {
            // Look again when the campaign would be due, or after a lease when it cannot
            // be (no contact yet, leading, learning): a contact in between moves `due`.
            let at = due.filter(|d| *d > now).unwrap_or(now + timings.lease);
            tokio::select! {
                () = tokio::time::sleep_until(at) => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        tracing::info!(
            silent_ms = contact.last().map(|l| (now - l).as_millis() as u64),
            "no leader heard from; starting an election"
        );
        contact.touch();
        jitter = timings.draw();
        if let Err(e) = raft.trigger().elect().await {
            tracing::warn!(error = %e, "raft core stopped; no more elections started");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_waits_out_the_lease_and_a_candidate_only_a_heartbeat() {
        let mut c = NodeConfig::new(1, "127.0.0.1:1", "/nonexistent");
        c.heartbeat_interval_ms = 50;
        c.election_timeout_min_ms = 150;
        c.election_timeout_max_ms = 250;
        let t = CampaignTimings::of(&c);
        assert_eq!(t.spread, Duration::from_millis(100));
        let j = Duration::from_millis(7);
        assert_eq!(t.wait(true, j), Duration::from_millis(257));
        assert_eq!(t.wait(false, j), Duration::from_millis(57));
        for _ in 0..100 {
            assert!(t.draw() <= t.spread);
        }
    }

    #[test]
    fn only_followers_and_candidates_campaign() {
        assert!(may_campaign(ServerState::Follower));
        assert!(may_campaign(ServerState::Candidate));
        assert!(!may_campaign(ServerState::Leader));
        assert!(!may_campaign(ServerState::Learner));
        assert!(!may_campaign(ServerState::Shutdown));
    }
}
