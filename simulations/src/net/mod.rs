//! The production allocator and agent code on a simulated network and clock (turmoil).
//!
//! The allocator hosts serve the real lease service (`LeaseServer`) with a root ledger and
//! one policy on simulated TCP: one host over a single-node `LocalReplica`, or a Raft
//! cluster of production `RaftNode`s with sled storage in per-host directories
//! ([`cluster`]). N agent hosts each run the real `Engine`, `LeaseManager` and
//! `RemoteGrantor` (tonic over the same simulated TCP, listing every allocator) and offer
//! more traffic than the policy's rate. Every clock in the run follows tokio's virtual
//! time, which turmoil advances one tick at a time; an agent host's clocks may be stepped
//! by an offset ([`clock`]). Partitions between an agent and the allocators, latency
//! changes, agent crashes with restarts (optionally from a state file on the agent's disk),
//! clock steps, leader crashes and allocators cut off
//! from their peers are drawn from the seed ([`faults`]); network delays come from
//! turmoil's own rng, seeded with the same seed. Optionally an admin host applies a new
//! version of the policy mid-run through the allocator's admin service ([`rollout`]). At
//! the end every admission window is checked against `B + r·T` ([`check`]; per version
//! around a rollout) or, for a fixed window, sliding window or calendar policy
//! ([`windows`]), every window against its limit on the grantor's timeline
//! ([`window_check`], [`timeline`]); and the leases each crashed agent left behind against
//! what it admitted under them ([`settle`]).
//!
//! What replays exactly and what does not is described in `docs/simulations.md`.

pub mod accounting;
mod apply;
pub mod check;
pub mod clock;
pub mod cluster;
pub mod demand;
pub mod expiry;
pub mod faults;
pub mod hosts;
pub mod receipts;
pub mod region;
mod report;
pub mod rollout;
mod run;
pub mod settle;
pub mod sockets;
pub mod spray;
pub mod timeline;
pub mod transport;
mod validate;
pub mod window_check;
pub mod windows;

pub use apply::{AppliedFault, LeaderTerm};
pub use check::{check_admissions, Admission, TrafficLog};
pub use demand::Demand;
pub use faults::{Action, Scheduled};
pub use report::{GrantorBooks, NetReport};
pub use rollout::{RolloutCheck, RolloutSpec};
pub use run::{plan, run};
pub use settle::Settlement;
pub use window_check::{WindowCheck, WindowCount};
pub use windows::Window;

use leasehold_common::policy::FailureMode;
use leasehold_common::rate::Rate;

/// The calendar instant runs start at unless configured otherwise (2026-01-01T00:00:00Z),
/// in seconds since the UNIX epoch; fixed so that no run depends on when it was started.
pub const START_UNIX_S_DEFAULT: u64 = 1_767_225_600;
/// The latest calendar instant a run may start at (2100-01-01T00:00:00Z).
pub const START_UNIX_S_MAX: u64 = 4_102_444_800;
/// Most agent hosts in one run.
pub const AGENTS_MAX: usize = 160;
/// Longest run, in milliseconds of simulated time.
pub const DURATION_MS_MAX: u64 = 600_000;
/// Longest holder refresh horizon, in milliseconds (the holder's own limit).
pub const HOLDER_REFRESH_HORIZON_MS_MAX: u64 = 3_600_000;
/// Longest interval between an agent's reports on a lease, in milliseconds.
pub const REPORT_EVERY_MS_MAX: u64 = 60_000;
/// Most requests one agent offers per round.
pub const OFFER_PER_ROUND_MAX: u64 = 10_000;
/// How long a run stands still in real time at each pause (see
/// [`NetConfig::real_pause_every_ms`]): longer than the one real-time window known in the
/// dependencies, h2's one second memory of a stream it reset.
pub const REAL_PAUSE_MS: u64 = 1_200;
/// Shortest simulated time between two real-time pauses, in milliseconds.
pub const REAL_PAUSE_EVERY_MS_MIN: u64 = 100;

/// Why a networked run could not be made or finished.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A configuration value is out of range.
    #[error("net simulation setting `{field}` = {value} is invalid: {reason}")]
    InvalidConfig {
        field: &'static str,
        value: u64,
        reason: &'static str,
    },
    /// A host's software failed, or turmoil stopped the run.
    #[error("net simulation seed {seed} failed at {at_ms} ms: {reason}")]
    Failed {
        seed: u64,
        at_ms: u64,
        reason: String,
    },
}

/// The shape of a networked run. Everything else derives from the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConfig {
    pub agents: usize,
    /// Simulated time the run lasts, in milliseconds.
    pub duration_ms: u64,
    pub policy_id: String,
    /// The policy's rate `r`, in units per second, and its burst `B`, in units (a token
    /// bucket; unused when the policy has a `window`).
    pub rate_per_s: u64,
    pub burst: u64,
    /// A fixed window, sliding window or calendar budget instead of the token bucket; its
    /// bound is checked per window on the grantor's timeline ([`window_check`]).
    pub window: Option<Window>,
    /// The calendar instant the run starts at, in seconds since the UNIX epoch: where
    /// every host's calendar and a new cluster's timeline begin.
    pub start_unix_s: u64,
    pub lease_ttl_ms: u64,
    /// How far ahead a holder asks for credit: its lease covers its demand over this long.
    pub refresh_horizon_ms: u64,
    /// The agents' own refresh horizon (`HolderConfig::refresh_horizon_ms`): they ask for
    /// more when what they hold would not last this long, or their lease expires within it.
    /// `None` keeps the holder's default.
    pub holder_refresh_horizon_ms: Option<u64>,
    /// How often an agent reports on each lease it holds, whatever its credit, in
    /// milliseconds (`ManagerConfig::report_every_ms`).
    pub report_every_ms: u64,
    /// Each agent offers `offer_per_round` requests every `offer_every_ms`.
    pub offer_every_ms: u64,
    pub offer_per_round: u64,
    /// Faults drawn from the seed (see [`faults::schedule`]).
    pub faults: usize,
    /// One-way link latency outside latency faults, at most; and the most a fault sets.
    pub latency_ms_base: u64,
    pub latency_ms_max: u64,
    /// Longest partition or agent outage, in milliseconds.
    pub outage_ms_max: u64,
    /// Allocator hosts: 1 serves a single-node replica; more run a Raft cluster, and its
    /// faults (leader crashes, an allocator cut off from its peers) are drawn too.
    pub cluster: usize,
    /// Whether a Raft cluster's faults (leader crashes, an allocator cut off from its peers)
    /// are drawn with the others; a scenario that scripts its own may turn them off, so
    /// that a drawn restart cannot bring its crashed leader back before it was replaced.
    pub draw_allocator_faults: bool,
    /// Raft heartbeat period, in milliseconds; elections time out after 5–10 of them.
    pub raft_heartbeat_ms: u64,
    /// When set, the allocator leading at this instant (ms) crashes, whatever the seed
    /// draws, and restarts `outage_ms_max` later. Raft clusters only.
    pub leader_crash_at_ms: Option<u64>,
    /// Largest clock step drawn at an agent host, in milliseconds; zero draws none.
    pub clock_step_ms_max: u64,
    /// Whether an agent host's clock step moves the monotonic clock its engine and lease
    /// manager decide by, besides its wall clock. On a real host only the wall clock steps
    /// (`std::time::Instant` never goes back); stepping both tests code that would trust a
    /// clock that did.
    pub clock_steps_monotonic: bool,
    /// Puts a delegated region (a single-node Raft cluster leasing from the global
    /// allocators) between the global allocators and the agents; cuts between the region and
    /// the global allocators are drawn too.
    pub region: bool,
    /// Agents keep their lease state (durable marks, request ids) in a state file on their
    /// host's disk, and a crashed agent restarts with it, as a restarted process would;
    /// without, it restarts with nothing held.
    pub agent_state: bool,
    /// When non-zero, the run stands still for [`REAL_PAUSE_MS`] of real time every this many
    /// milliseconds of simulated time. Nothing in the run may depend on it: a paused run of a
    /// seed must admit exactly what an unpaused one does.
    pub real_pause_every_ms: u64,
    /// A new version of the policy applied mid-run through the allocator's admin service,
    /// as `leasectl policy apply` does it.
    pub rollout: Option<RolloutSpec>,
    /// Draws a rollout from the seed instead (see [`rollout::draw`]): its instant, new rate
    /// and burst differ from seed to seed.
    pub rollout_drawn: bool,
    /// What agents do while their grantor cannot be reached (the policy's `failure.mode`).
    /// Under `restricted`, every fifth request is critical ([`RESTRICTED_PRIORITY`]) and
    /// the local emergency rate is [`RESTRICTED_RATE_PER_S`] per agent.
    pub failure: FailureMode,
    /// How the offered traffic is shared among agents over time.
    pub demand: Demand,
    /// Faults at fixed instants, applied besides those drawn from the seed (a scenario's
    /// script).
    pub script: Vec<Scheduled>,
    /// An attacker behind one agent presenting a fresh tenant on every request.
    pub spray: Option<Spray>,
    /// Each agent engine's key-table cap (`EngineLimits::keys_max`); None keeps the default.
    pub agent_keys_max: Option<usize>,
    /// How long a key of an agent's engine may sit unused before it can be dropped
    /// (`EngineLimits::key_idle_ns`), in milliseconds; None keeps the default.
    pub agent_key_idle_ms: Option<u64>,
    /// The single-node allocator ledger's key cap (`LedgerLimits::keys_max`); None keeps
    /// the default.
    pub grantor_keys_max: Option<usize>,
}

/// Key spraying: agent `agent` also offers `keys_per_round` requests a round, each for a
/// tenant never seen before, from `from_ms` until `until_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spray {
    pub agent: usize,
    pub keys_per_round: u64,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// The lowest priority a `restricted` policy still admits in a run, and the priority of
/// the critical requests the agents offer.
pub const RESTRICTED_PRIORITY: u8 = 5;
/// The local emergency rate of a `restricted` policy in a run, per agent, in units per
/// second.
pub const RESTRICTED_RATE_PER_S: u64 = 20;

impl NetConfig {
    /// Three agents for 10 s: short enough for tests in debug builds.
    pub fn quick() -> Self {
        NetConfig {
            agents: 3,
            duration_ms: 10_000,
            policy_id: "api".into(),
            rate_per_s: 100,
            burst: 200,
            window: None,
            start_unix_s: START_UNIX_S_DEFAULT,
            lease_ttl_ms: 2_000,
            refresh_horizon_ms: 200,
            holder_refresh_horizon_ms: None,
            report_every_ms: 200,
            offer_every_ms: 10,
            offer_per_round: 1,
            faults: 4,
            latency_ms_base: 5,
            latency_ms_max: 300,
            outage_ms_max: 3_000,
            cluster: 1,
            draw_allocator_faults: true,
            raft_heartbeat_ms: 100,
            leader_crash_at_ms: None,
            clock_step_ms_max: 0,
            clock_steps_monotonic: true,
            region: false,
            agent_state: false,
            real_pause_every_ms: 0,
            rollout: None,
            rollout_drawn: false,
            failure: FailureMode::CachedLease,
            demand: Demand::Even,
            script: Vec::new(),
            spray: None,
            agent_keys_max: None,
            agent_key_idle_ms: None,
            grantor_keys_max: None,
        }
    }

    /// [`NetConfig::quick`] on a 3-node Raft cluster whose leader crashes at 4 s.
    pub fn quick_cluster() -> Self {
        NetConfig {
            cluster: 3,
            leader_crash_at_ms: Some(4_000),
            ..NetConfig::quick()
        }
    }

    /// Where the global allocator hosts are reached (`host:port`), in host order.
    pub fn global_addrs(&self) -> Vec<String> {
        (0..self.cluster).map(cluster::allocator_addr).collect()
    }

    /// Where agents lease from: the region if there is one, else the global allocators.
    pub fn agent_addrs(&self) -> Vec<String> {
        if self.region {
            vec![region::region_addr()]
        } else {
            self.global_addrs()
        }
    }

    /// The policy the allocator serves and the agents enforce at the start.
    pub fn policy_yaml(&self) -> String {
        self.policy_yaml_with(self.rate_per_s, self.burst)
    }

    /// The run's policy with rate `rate_per_s` and burst `burst`; the rest is the same. A
    /// window policy has its window instead.
    pub fn policy_yaml_with(&self, rate_per_s: u64, burst: u64) -> String {
        let budget = match &self.window {
            Some(w) => w.policy_yaml(),
            None => format!("rate: {{units: {rate_per_s}, per: 1s}}\nburst: {burst}\n"),
        };
        format!(
            "id: {}\ndimensions: [{{name: tenant}}]\nkey: [tenant]\n{budget}scope: global\nlease: {{ttl: {}ms, refresh_horizon: {}ms, reserve_fraction: 0}}\n{}",
            self.policy_id,
            self.lease_ttl_ms,
            self.refresh_horizon_ms,
            self.failure_yaml()
        )
    }

    /// The policy's `failure` section; none for the default (`cached_lease`).
    fn failure_yaml(&self) -> String {
        match self.failure {
            FailureMode::CachedLease => String::new(),
            FailureMode::Restricted => format!(
                "failure: {{mode: restricted, min_priority: {RESTRICTED_PRIORITY}, rate: {{units: {RESTRICTED_RATE_PER_S}, per: 1s}}}}\n"
            ),
            FailureMode::FailClosed => "failure: {mode: fail_closed}\n".into(),
            FailureMode::FailOpen => "failure: {mode: fail_open}\n".into(),
        }
    }

    /// The policy's rate `r`.
    ///
    /// # Panics
    /// If `rate_per_s` is zero; [`NetConfig::validate`] rejects that.
    pub fn rate(&self) -> Rate {
        Rate::per_second(self.rate_per_s).expect("validated rate")
    }

    /// Requests offered per second by all agents together, in units.
    pub fn offered_per_s(&self) -> u64 {
        (self.agents as u64 * self.offer_per_round * 1_000) / self.offer_every_ms
    }
}
