//! Elections this node starts itself, so a dead leader is replaced soon after the voters'
//! leader lease has run out, with a delay drawn afresh for every campaign.
//!
//! openraft 0.9 starts an election from its tick (every 1.5 × heartbeat) once
//! `leader_lease + T` has passed since the node's vote was last refreshed, where the lease is
//! `election_timeout_max` and T is drawn from `[election_timeout_min, election_timeout_max)`
//! once, when the node starts. So a failover waits for the lease, then T, then the next tick.
//! And a node refused for a shorter log adds `2 × election_timeout_max` to its timeout until
//! it next campaigns, so in a later failover, where its log may be the only longest one, it
//! still waits that much longer.
//!
//! The campaigner starts an election once this node has heard nothing from a leader (nor
//! from a candidate it voted for) for the lease plus a random delay below
//! `election_timeout_max − election_timeout_min`, and, while no leader has emerged since its
//! own campaign, again after a heartbeat period (doubling with each further campaign, up to
//! the lease) plus such a delay. A node refused because a voter's log is longer than its own
//! waits a lease and a spread before trying again, as openraft does: the node with the
//! longer log must win, and every campaign with a higher term would depose it again
//! (openraft 0.9 has no pre-vote). The voters refuse a campaign
//! while their own lease on the old leader holds, so it cannot cut a live leader short any
//! more than openraft's timer does; electing at any moment is safe in Raft, the delays only
//! decide how soon and how often. openraft's own timer stays on: it still starts a cluster
//! whose nodes have heard from no one since they started.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::{Raft, ServerState};
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use super::config::NodeConfig;
use super::types::TypeConfig;

/// When this node last heard from a leader, granted a vote, or campaigned, and whether its
/// last campaign met a longer log; the Raft calls this node answers and makes refresh it.
#[derive(Debug, Default)]
pub(crate) struct Contact {
    heard: Mutex<Heard>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Heard {
    /// None until the first contact since this node started.
    last: Option<Instant>,
    /// Campaigns this node started since it last heard from a leader or voted for
    /// another candidate.
    campaigns: u32,
    /// A voter refused this node's last campaign for a longer log than its own.
    outlogged: bool,
}

impl Contact {
    /// A leader or a candidate this node voted for is alive.
    pub(crate) fn touch(&self) {
        *self.lock() = Heard {
            last: Some(Instant::now()),
            ..Heard::default()
        };
    }

    fn campaigned(&self) {
        let mut heard = self.lock();
        *heard = Heard {
            last: Some(Instant::now()),
            campaigns: heard.campaigns.saturating_add(1),
            outlogged: false,
        };
    }

    /// A voter refused this node's campaign: its log is longer.
    pub(crate) fn outlogged(&self) {
        self.lock().outlogged = true;
    }

    fn heard(&self) -> Heard {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Heard> {
        self.heard.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Most doublings of the retry period; the lease caps it long before.
const CAMPAIGN_DOUBLINGS_MAX: u32 = 16;

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

    /// How long after the last contact to campaign, plus `jitter`: a lease and a spread
    /// when this node's campaign met a longer log, so the node holding it can campaign
    /// twice first (once to learn the term this node reached, once to win); while its own
    /// campaigns bring no leader, a retry period doubling with each up to the lease, so a
    /// node cut off from the others campaigns no more often than openraft would; else (it
    /// follows a leader, or voted for another candidate) past the lease.
    fn wait(&self, heard: Heard, jitter: Duration) -> Duration {
        let base = if heard.outlogged {
            self.lease + self.spread
        } else if heard.campaigns > 0 {
            let doublings = (heard.campaigns - 1).min(CAMPAIGN_DOUBLINGS_MAX);
            (self.retry * (1 << doublings)).min(self.lease)
        } else {
            self.lease
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
    let mut seen_vote = metrics.borrow().vote;
    loop {
        let (state, vote) = {
            let m = metrics.borrow();
            (m.state, m.vote)
        };
        // A vote granted to another node or a new leader shows in the metrics before the
        // call that made it returns and touches `contact`; campaigning in between would
        // depose the candidate this node just voted for. While campaigning, a new vote may
        // instead be a higher term learnt from a refusal, after which this node should
        // try again soon; a vote it granted meanwhile is touched within the retry period.
        let mut heard = contact.heard();
        if vote != seen_vote {
            seen_vote = vote;
            if heard.campaigns == 0 {
                contact.touch();
                heard = contact.heard();
            }
        }
        let due = heard.last.map(|last| last + timings.wait(heard, jitter));
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
        let silent_ms = heard.last.map(|l| (now - l).as_millis() as u64);
        if heard.campaigns == 0 {
            tracing::info!(silent_ms, "no leader heard from; starting an election");
        } else {
            let (campaigns, outlogged) = (heard.campaigns, heard.outlogged);
            tracing::debug!(campaigns, outlogged, "no leader yet; campaigning again");
        }
        contact.campaigned();
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
    fn a_follower_waits_out_the_lease_a_candidate_less_and_a_shorter_log_longer() {
        let mut c = NodeConfig::new(1, "127.0.0.1:1", "/nonexistent");
        c.heartbeat_interval_ms = 50;
        c.election_timeout_min_ms = 150;
        c.election_timeout_max_ms = 250;
        let t = CampaignTimings::of(&c);
        assert_eq!(t.spread, Duration::from_millis(100));
        let j = Duration::from_millis(7);
        let heard = |campaigns, outlogged| Heard {
            last: None,
            campaigns,
            outlogged,
        };
        assert_eq!(t.wait(heard(0, false), j), Duration::from_millis(257));
        assert_eq!(t.wait(heard(1, false), j), Duration::from_millis(57));
        assert_eq!(t.wait(heard(2, false), j), Duration::from_millis(107));
        assert_eq!(t.wait(heard(3, false), j), Duration::from_millis(207));
        assert_eq!(t.wait(heard(4, false), j), Duration::from_millis(257));
        assert_eq!(
            t.wait(heard(u32::MAX, false), j),
            Duration::from_millis(257)
        );
        assert_eq!(t.wait(heard(1, true), j), Duration::from_millis(357));
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
