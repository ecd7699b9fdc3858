//! What a networked run did: its admissions and the checks of every promise over them,
//! the faults as applied, the leaders, and the grantor's books at the end.

use super::accounting::Miscount;
use super::apply::{AppliedFault, LeaderTerm};
use super::check::Admission;
use super::expiry::ExpiryCheck;
use super::faults::{Action, Scheduled};
use super::rollout::RolloutReport;
use super::settle::Settlement;
use crate::bound::BoundCheck;
use leasehold_allocator::metrics::{ledger_figures, LedgerFigures};
use leasehold_common::ledger::Ledger;

/// What a networked run did.
#[derive(Clone, Debug)]
pub struct NetReport {
    pub seed: u64,
    /// Every admission, ordered by time then agent.
    pub admissions: Vec<Admission>,
    /// P1 over every window of the run.
    pub bound: BoundCheck,
    /// The faults drawn from the seed (plus a fixed leader crash, if configured).
    pub schedule: Vec<Scheduled>,
    /// The faults as applied, with the allocator node each one hit.
    pub applied: Vec<AppliedFault>,
    /// Every leader the Raft cluster had, in order (empty for a single-node allocator).
    pub leaders: Vec<LeaderTerm>,
    /// How many times each agent's software started (1 + its restarts).
    pub agent_starts: Vec<u32>,
    /// Requests offered in total (admitted or not).
    pub offered: u64,
    /// `B + r·T` for the whole run: the most the run may admit (under the first version;
    /// a rollout's bounds are in [`NetReport::rollout`]); for a window policy, the limit of
    /// every window the run touched.
    pub admitted_max: u64,
    /// A window policy's check, per window on the grantor's timeline; `bound` then holds
    /// its totals.
    pub windows: Option<super::WindowCheck>,
    /// Whether the allocator's ledger accounts for every unit at the end (on every running
    /// node of a cluster).
    pub ledger_conserved: bool,
    /// Per agent crash: how the grantor settled the leases the crashed run held, against
    /// what the run admitted under them (P2 across the crash).
    pub settlements: Vec<Settlement>,
    /// The policy rollout, when the run has one; `bound` then sums its per-version checks.
    pub rollout: Option<RolloutReport>,
    /// Admissions let through uncharged by the policy's failure behaviour (`fail_open`,
    /// `restricted`), ordered like `admissions`; not part of the bound's check.
    pub uncharged: Vec<Admission>,
    /// P3: charged admissions made with no unexpired lease in hand.
    pub expiry: ExpiryCheck,
    /// P7: agent runs whose engine counters were compared with their traffic, and those
    /// that disagreed.
    pub accounts_checked: u64,
    pub miscounts: Vec<Miscount>,
    /// The grantor's books at the end (the ledger the agents lease from), when readable.
    pub grantor: Option<GrantorBooks>,
    /// Calls the agents made to their grantor (acquire, report, release).
    pub grantor_calls: u64,
    /// Per agent: when it received each lease version (a grant or a renewal), in order.
    pub lease_versions_received_ns: Vec<Vec<u64>>,
    /// At each leader crash: when (ms), and how many agent calls were on the wire.
    pub leader_crash_in_flight: Vec<(u64, u64)>,
    /// What sprayed requests did, when the run has an attacker.
    pub spray: super::spray::SprayLog,
    /// The most keys the grantor's ledger held, sampled every 100 ms of the run.
    pub grantor_keys_peak: usize,
    /// Per agent: the clock readings its engines clamped because the host's clock stepped
    /// back, and by how much in total, over all its runs.
    pub clock_rollbacks: Vec<leasehold_common::time::RollbackStats>,
}

/// The grantor's books at the end of a run: the run's policy's figures as the allocator's
/// `/metrics` sums them, and its state against its caps (P4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrantorBooks {
    pub figures: LedgerFigures,
    /// Window credit that lapsed: free when its window ended, or handed back after it.
    pub lapsed: u64,
    pub keys: usize,
    pub keys_max: usize,
    /// Leases on the books, closing ones included: what `leases_max` caps.
    pub leases: usize,
    pub leases_max: usize,
}

impl GrantorBooks {
    /// Reads `ledger`'s books of policy `policy_id`.
    pub fn read(ledger: &Ledger, policy_id: &str) -> Self {
        let limits = &ledger.config().limits;
        GrantorBooks {
            figures: ledger_figures(ledger).remove(policy_id).unwrap_or_default(),
            lapsed: ledger
                .accounts()
                .filter(|(_, a)| a.policy_id == policy_id)
                .map(|(_, a)| a.stats.lapsed)
                .sum(),
            keys: ledger.accounts().count(),
            keys_max: limits.keys_max,
            leases: ledger.leases().count(),
            leases_max: limits.leases_max,
        }
    }

    /// Keys and leases within their caps.
    pub fn within_caps(&self) -> bool {
        self.keys <= self.keys_max && self.leases <= self.leases_max
    }
}

impl NetReport {
    /// P1 held, the ledger balanced, no crashed agent's spending went back unspent, and a
    /// rollout, if any, held ([`RolloutReport::holds`]).
    pub fn passed(&self) -> bool {
        self.bound.violations == 0
            && self.expiry.violations == 0
            && self.miscounts.is_empty()
            && self
                .grantor
                .as_ref()
                .is_none_or(|g| g.within_caps() && self.grantor_keys_peak <= g.keys_max)
            && self.spray.engine_keys_peak <= self.spray.engine_keys_max
            && self.ledger_conserved
            && self.settlements.iter().all(Settlement::holds)
            && self.rollout.as_ref().is_none_or(RolloutReport::holds)
    }

    /// What differs between this run and `other` of the same seed, first found first:
    /// `None` when `other` replayed it exactly (faults as applied, leader history, every
    /// admission, the crashed agents' settlements, the rollout).
    pub fn replay_difference(&self, other: &NetReport) -> Option<&'static str> {
        if self.applied != other.applied {
            Some("the faults were applied differently")
        } else if self.leaders != other.leaders {
            Some("the leader history differs")
        } else if self.admissions != other.admissions {
            Some("the admission log differs")
        } else if self.settlements != other.settlements {
            Some("the crashed agents' settlements differ")
        } else if self.rollout != other.rollout {
            Some("the rollout differs")
        } else {
            None
        }
    }

    /// Admissions per agent.
    pub fn admitted_by_agent(&self, agents: usize) -> Vec<u64> {
        let mut out = vec![0; agents];
        for a in &self.admissions {
            if let Some(n) = out.get_mut(a.agent as usize) {
                *n += 1;
            }
        }
        out
    }

    /// Admissions at or after `at_ms`.
    pub fn admitted_since(&self, at_ms: u64) -> usize {
        let at_ns = at_ms.saturating_mul(1_000_000);
        self.admissions.iter().filter(|a| a.at_ns >= at_ns).count()
    }

    /// Leader crashes that hit a node: (when, node id).
    pub fn leader_crashes(&self) -> Vec<(u64, u64)> {
        self.applied
            .iter()
            .filter(|f| f.action == Action::CrashLeader)
            .filter_map(|f| Some((f.at_ms, f.node?)))
            .collect()
    }

    /// FNV-1a over the admission log: equal logs give equal digests, for comparing runs.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for a in &self.admissions {
            for b in a
                .at_ns
                .to_le_bytes()
                .into_iter()
                .chain(a.agent.to_le_bytes())
            {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    }
}
