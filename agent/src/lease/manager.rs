//! The holder side of the lease protocol: keeps each key's credit slot supplied.
//!
//! One task owns every lease of this holder. For each key it knows what it deposited into
//! the slot and what it withdrew, so the exact spend is `deposited − withdrawn − remaining`
//! at any instant, without locks on the hot path. It acquires a lease the first time a key
//! sees traffic, reports cumulative usage and renews before the credit or the lease runs out
//! (sized from measured demand), hands back credit well beyond its demand, releases keys that
//! went idle or that the engine dropped (their slot is then held by nobody else), and
//! releases everything with its exact final usage on shutdown.
//!
//! **Crash safety** ([`LeaseManager::with_store`], `--state-file`). Per lease, the manager
//! makes a *mark* durable before the slot may hold credit up to it (see [`super::marks`]),
//! a chunk ahead of spending, batched into one flush per tick. A restarted agent releases
//! every lease of its previous run with `final_used` = its mark — at least what was spent —
//! so the grantor never grants that credit again while it could have been spent, and gets
//! the rest back at once. Request ids continue above the block reserved on disk. Without a
//! store the agent starts with nothing and the old leases are written off at expiry.
//!
//! **Watch stream** ([`LeaseManager::with_engine`]). The manager follows the grantor's
//! watch stream: a revoked lease's slot is closed at once; policy changes are installed in
//! the engine (an agent needs no policy files of its own) and emergency switches reach
//! it. A broken or silent stream is reopened with the last sequence number seen.
//!
//! **Signatures** (`ManagerConfig::verifier`). With the grantor's public keys configured, a
//! lease (or a new version of one) whose signature does not verify is never spent.

use super::bounded::bounded;
use super::fair::fair_order;
use super::marks::MARK_UNBOUNDED;
use super::state::{LeaseStore, StateError};
use super::state_sled::SledStore;
use super::watch::Watching;
use crate::credit::{CreditSlot, SlotCounts, SlotState};
use crate::engine::{AcquireReceiver, AcquireRequest, Engine};
use leasehold_client::{Grantor, GrantorError};
use leasehold_common::lease::LeaseVerifier;
use leasehold_common::lease::{wait_after_denial_ms, HolderConfig};
use leasehold_common::time::{Clock, Nanos};
use leasehold_proto::leasehold::v1 as pb;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub(super) const NS_PER_MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct ManagerConfig {
    pub holder_id: String,
    pub holder: HolderConfig,
    /// How often the manager looks at its slots.
    pub tick_ms: u64,
    /// Longest time between usage reports of a lease.
    pub report_every_ms: u64,
    /// Credit asked for on a key's first lease, before any demand is measured.
    pub initial_want: u64,
    /// Keys without traffic for this long give their lease back.
    pub idle_release_ms: u64,
    /// Wait before asking again after a denial or an unreachable grantor.
    pub retry_ms: u64,
    /// A report still unanswered after this long marks its lease's grantor unreachable
    /// while the call goes on, so that fail-closed and restricted policies stop spending
    /// held credit without waiting for the request's own timeout.
    pub report_unanswered_ms: u64,
    pub leases_max: usize,
    /// Most first leases asked for per second. Keys held already are renewed first and
    /// apart from these, so a spray of new keys waits here instead of starving them.
    pub acquire_rate_max_per_s: u64,
    /// Most first-lease calls to the grantor at once.
    pub acquire_in_flight_max: usize,
    /// Most reports, renewals and releases of held leases to the grantor at once.
    pub renew_in_flight_max: usize,
    /// Most calls per round for held leases nobody used since their last report (their
    /// renewals and releases); the rest wait for the next round. Leases in use are all
    /// served every round.
    pub quiet_calls_per_tick_max: usize,
    /// Most keys waiting here for a first lease (or to ask again); past it the keys asked
    /// for only once are put back to ask again on their next request, newest first.
    pub acquire_waiting_max: usize,
    /// With a state file: the smallest step by which a lease's durable mark is raised
    /// (larger under higher demand), in units.
    pub mark_chunk_min: u64,
    /// A watch stream silent for this long is reopened, until a heartbeat names its
    /// interval (then twice that).
    pub watch_silence_max_ms: u64,
    /// Wait before reopening a watch stream that could not be opened or ended.
    pub watch_retry_ms: u64,
    /// The engine's policies from the watch stream count as stale once it has not
    /// confirmed them for this long (see [`Engine::follow_allocator_policies`]).
    pub policy_stale_after_ms: u64,
    /// Where [`LeaseManager::open`] keeps the crash-safety state; None: start with
    /// nothing after a restart.
    pub state_file: Option<PathBuf>,
    /// Keys the grantor signs leases with; a lease without a valid signature by one of
    /// them is never spent. None: leases are trusted on the grantor's TLS identity alone.
    pub verifier: Option<LeaseVerifier>,
}

impl ManagerConfig {
    pub fn new(holder_id: impl Into<String>) -> Self {
        ManagerConfig {
            holder_id: holder_id.into(),
            holder: HolderConfig::default(),
            tick_ms: 20,
            report_every_ms: 500,
            initial_want: 100,
            idle_release_ms: 30_000,
            retry_ms: 250,
            report_unanswered_ms: 1_000,
            leases_max: 100_000,
            acquire_rate_max_per_s: 2_000,
            acquire_in_flight_max: 16,
            renew_in_flight_max: 64,
            quiet_calls_per_tick_max: 64,
            acquire_waiting_max: 16_384,
            mark_chunk_min: 64,
            watch_silence_max_ms: 15_000,
            watch_retry_ms: 1_000,
            policy_stale_after_ms: 300_000,
            state_file: None,
            verifier: None,
        }
    }
}

/// What the manager did, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerCounters {
    pub acquires: u64,
    pub denials: u64,
    pub reports: u64,
    pub releases: u64,
    pub unreachable: u64,
    /// Units released back unspent.
    pub reclaimed: u64,
    /// Leases of a previous run released at start, and the units they gave back.
    pub recovered: u64,
    pub recovered_reclaimed: u64,
    /// Durable writes of the state file, and those that failed.
    pub state_commits: u64,
    pub state_errors: u64,
    /// Leases revoked over the watch stream, and watch streams opened.
    pub revocations: u64,
    pub watch_connects: u64,
    pub policies_installed: u64,
    /// Leases refused because their signature did not verify.
    pub bad_signatures: u64,
    /// Leases handed back because the engine dropped their key.
    pub evicted_released: u64,
    /// Keys put back to ask again because `acquire_waiting_max` keys were waiting.
    pub acquires_shed: u64,
}

pub(super) type HeldKey = (Arc<str>, Box<str>);

pub(super) struct Held {
    pub(super) policy_id: Arc<str>,
    pub(super) key: Box<str>,
    pub(super) slot: Arc<CreditSlot>,
    pub(super) lease_id: u64,
    pub(super) generation: u64,
    /// Credit the grantor holds for us: granted minus handed back.
    pub(super) credit: u64,
    /// Units handed back, cumulative (the report's `return_credit`).
    pub(super) returned: u64,
    pub(super) deposited: u64,
    pub(super) withdrawn: u64,
    /// Durable mark (`MARK_UNBOUNDED` without a store).
    pub(super) mark: u64,
    pub(super) reported_used: u64,
    pub(super) last_report: Nanos,
    pub(super) offered_at_report: u64,
    pub(super) deadline: Nanos,
    /// How long the current version was granted for, in nanoseconds.
    pub(super) ttl_ns: u64,
    /// The last renewal could not move the deadline much: the lease ends with its window
    /// (or its grantor's own upstream lease). Nearing that end asks for nothing; the lease
    /// is released with its final usage when it comes.
    pub(super) pinned: bool,
    /// The grantor last had no more credit to add: running low asks again only from then.
    pub(super) ask_again_at: Nanos,
    pub(super) priority: u8,
    /// Demand the last report told the grantor, in units per second.
    pub(super) reported_demand: u64,
    /// The slot's counts where this lease started counting: what grantors had
    /// acknowledged under earlier leases of the key.
    pub(super) counts_base: SlotCounts,
    /// The slot's counts the last report sent; acknowledged when it is answered.
    pub(super) counts_sent: SlotCounts,
}

impl Held {
    pub(super) fn in_slot(&self) -> u64 {
        self.deposited - self.withdrawn
    }

    pub(super) fn spent(&self) -> u64 {
        self.in_slot()
            .saturating_sub(self.slot.remaining())
            .max(self.reported_used)
    }
}

pub struct LeaseManager {
    pub(super) cfg: ManagerConfig,
    pub(super) grantor: Arc<dyn Grantor>,
    pub(super) clock: Arc<dyn Clock>,
    queue: AcquireReceiver,
    pub(super) held: BTreeMap<HeldKey, Held>,
    /// Keys waiting for a first lease, each with the time it may be asked for.
    waiting: Vec<(AcquireRequest, Nanos)>,
    /// First leases that may be asked for now (`acquire_rate_max_per_s`), and when the
    /// allowance was last topped up.
    acquire_allowance: f64,
    acquire_allowance_at: Nanos,
    pub(super) next_request: u64,
    pub(super) store: Option<Arc<dyn LeaseStore>>,
    /// End of the request ids reserved on disk (unbounded without a store).
    pub(super) request_ids_end: u64,
    /// Highest request id a grantor refused as stale said it had seen; the next round
    /// continues above it.
    pub(super) ids_floor: u64,
    /// Leases closed here but still recorded in the store.
    pub(super) forget: Vec<u64>,
    /// Leases of a previous run not yet released (grantor unreachable), with their marks.
    pub(super) orphans: BTreeMap<u64, u64>,
    pub(super) engine: Option<Arc<Engine>>,
    /// The store could not be read at start: nothing is acquired, so nothing is spent.
    pub(super) store_unreadable: bool,
    pub counters: ManagerCounters,
    /// Set once the watch stream delivered the grantor's current policies and switches.
    pub(super) synced: Arc<std::sync::atomic::AtomicBool>,
}

impl LeaseManager {
    /// `clock` must be the clock the engine decides with: deadlines are on its timeline.
    /// Usually a `SystemClock`; a simulation passes one that follows its virtual time.
    pub fn new(
        cfg: ManagerConfig,
        grantor: Arc<dyn Grantor>,
        clock: impl Clock + 'static,
        queue: AcquireReceiver,
    ) -> Self {
        LeaseManager {
            cfg,
            grantor,
            clock: Arc::new(clock),
            queue,
            held: BTreeMap::new(),
            waiting: Vec::new(),
            acquire_allowance: 0.0,
            acquire_allowance_at: Nanos::ZERO,
            next_request: request_ids_start(),
            store: None,
            request_ids_end: u64::MAX,
            ids_floor: 0,
            forget: Vec::new(),
            orphans: BTreeMap::new(),
            engine: None,
            store_unreadable: false,
            counters: ManagerCounters::default(),
            synced: Arc::default(),
        }
    }

    /// [`LeaseManager::new`], keeping its state in `cfg.state_file` if one is given.
    pub fn open(
        cfg: ManagerConfig,
        grantor: Arc<dyn Grantor>,
        clock: impl Clock + 'static,
        queue: AcquireReceiver,
    ) -> Result<Self, StateError> {
        let store = match &cfg.state_file {
            Some(path) => Some(SledStore::open(path, cfg.leases_max)?),
            None => None,
        };
        let manager = LeaseManager::new(cfg, grantor, clock, queue);
        Ok(match store {
            Some(store) => manager.with_store(Arc::new(store)),
            None => manager,
        })
    }

    /// Keeps crash-safety state in `store`: see the module doc.
    pub fn with_store(mut self, store: Arc<dyn LeaseStore>) -> Self {
        self.store = Some(store);
        self.request_ids_end = 0;
        self
    }

    /// Applies the watch stream's policy changes and emergency switches to `engine`.
    /// True once the watch stream delivered the grantor's current policies and switches:
    /// before that, an agent that takes its rules from the allocator is not ready to serve.
    pub fn policies_synced(&self) -> Arc<std::sync::atomic::AtomicBool> {
        Arc::clone(&self.synced)
    }

    pub fn with_engine(mut self, engine: Arc<Engine>) -> Self {
        if self.grantor.pushes_changes() {
            engine.follow_allocator_policies(self.cfg.policy_stale_after_ms);
        }
        self.engine = Some(engine);
        self
    }

    /// Runs until `shutdown` flips to true, then releases every lease.
    pub async fn run(
        mut self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> ManagerCounters {
        self.recover().await;
        let tick = Duration::from_millis(self.cfg.tick_ms.max(1));
        let mut watching = Watching::default();
        while !*shutdown.borrow() {
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                event = watching.next() => self.on_watch_item(&mut watching, event).await,
                _ = tokio::time::sleep(tick) => {
                    self.step().await;
                    self.keep_watching(&mut watching).await;
                }
            }
        }
        self.release_all().await;
        self.counters
    }

    pub(super) fn request_id(&mut self) -> u64 {
        self.next_request += 1;
        debug_assert!(self.next_request < self.request_ids_end);
        self.next_request
    }

    /// One round: renewals, reports and releases of held leases, then new keys and
    /// retries, then the durable marks and the deposits they allow. Held leases go first
    /// and in their own lane (`renew_in_flight_max`): first leases are limited in rate
    /// and number at once, so that a spray of new keys never delays the keys in use.
    pub async fn step(&mut self) {
        let now = self.clock.now();
        self.take_requests(now);
        // Every call below takes at most this many ids: per waiting key an acquire, the
        // release of a lease its key held before the engine dropped it and the release of a
        // refused lease; per held lease a report plus the release and restart of a
        // replacement.
        if self.ids_floor > self.next_request {
            tracing::info!(
                from = self.next_request,
                to = self.ids_floor,
                "request ids continue above those the grantor has seen"
            );
            self.next_request = self.ids_floor;
        }
        let ids = 3 * self.waiting.len() + 3 * self.held.len() + self.orphans.len();
        if !self.reserve_request_ids(ids as u64).await {
            return;
        }
        self.retry_orphans().await;
        self.maintain_all(now).await;
        self.acquire_due(now).await;
        self.top_up(now).await;
    }

    /// Takes the engine's new requests. Past `acquire_waiting_max` waiting keys, the last
    /// in serving order ([`fair_order`]) go back to ask again on their next request: keys
    /// asked for once, of the source with the most waiting, the newest first.
    fn take_requests(&mut self, now: Nanos) {
        while let Ok(req) = self.queue.try_recv() {
            self.waiting.push((req, now));
        }
        let max = self.cfg.acquire_waiting_max.max(1);
        if self.waiting.len() <= max {
            return;
        }
        self.waiting = fair_order(std::mem::take(&mut self.waiting));
        for (req, _) in self.waiting.drain(max..) {
            req.slot.set_state(SlotState::Idle);
            self.counters.acquires_shed += 1;
        }
    }

    /// Asks for the first leases that are due, as many as the rate allows, in serving
    /// order ([`fair_order`]).
    async fn acquire_due(&mut self, now: Nanos) {
        let rate = self.cfg.acquire_rate_max_per_s.max(1) as f64;
        let elapsed_s = now.saturating_since(self.acquire_allowance_at) as f64 / 1e9;
        self.acquire_allowance_at = now;
        // At most a tenth of a second's worth at once.
        let burst = (rate / 10.0).max(1.0);
        self.acquire_allowance = (self.acquire_allowance + elapsed_s * rate).min(burst);
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(_, at)| *at <= now);
        self.waiting = later;
        let due = fair_order(due);
        let room = self.cfg.leases_max.saturating_sub(self.held.len());
        let take = (self.acquire_allowance as usize).min(room);
        let mut asking = std::collections::BTreeSet::new();
        let mut calls = Vec::new();
        let mut settle = Vec::new();
        for (req, at) in due {
            let k: HeldKey = (Arc::clone(&req.policy_id), req.key.clone());
            if calls.len() >= take || asking.contains(&k) {
                self.waiting.push((req, at));
                continue;
            }
            // A new slot for a key still held: the engine dropped the old one and the key
            // came back. The old lease can no longer be spent through the engine; settle it
            // first.
            if let Some(old) = self.held.get(&k) {
                if Arc::ptr_eq(&old.slot, &req.slot) {
                    continue;
                }
                settle.push(self.held.remove(&k).expect("present"));
                self.counters.evicted_released += 1;
            }
            asking.insert(k);
            let r = self.acquire_request(&req);
            calls.push((req, r));
        }
        self.acquire_allowance -= calls.len() as f64;
        self.release_all_of(settle).await;
        let sent_at = self.clock.now();
        let grantor = Arc::clone(&self.grantor);
        let answers = bounded(calls, self.cfg.acquire_in_flight_max, |(req, r)| {
            let grantor = &grantor;
            let sent = SlotCounts {
                refused: r.refused_units,
                fail_open: r.fail_open_units,
                shaped: r.shaped_units,
            };
            async move { (req, sent, grantor.acquire(r).await) }
        })
        .await;
        for (req, sent, answer) in answers {
            if answer.is_ok() {
                // Nothing else acknowledges counts of a slot without a lease meanwhile, so
                // the acknowledged mark plus what was sent is what the slot had counted.
                let ack = req.slot.acknowledged();
                req.slot.acknowledge(SlotCounts {
                    refused: ack.refused + sent.refused,
                    fail_open: ack.fail_open + sent.fail_open,
                    shaped: ack.shaped + sent.shaped,
                });
            }
            self.acquired(req, answer, sent_at).await;
        }
    }

    fn acquire_request(&mut self, req: &AcquireRequest) -> pb::AcquireRequest {
        self.counters.acquires += 1;
        // Counts made while the key held no lease here (refusals while every unit was
        // leased elsewhere) have no lease to ride on: the acquire carries them.
        let counts = req.slot.counts().since(req.slot.acknowledged());
        pb::AcquireRequest {
            holder_id: self.cfg.holder_id.clone(),
            policy_id: req.policy_id.to_string(),
            key: req.key.to_string(),
            want_credit: self.cfg.initial_want,
            demand_milli_units_per_sec: 0,
            request_id: self.request_id(),
            priority: u32::from(req.priority),
            known_policy_version: req.policy_version,
            refused_units: counts.refused,
            shaped_units: counts.shaped,
            fail_open_units: counts.fail_open,
        }
    }

    /// Tells the engine whether the grantor answers (see `Engine::grantor_answering`).
    pub(super) fn note_answer<T>(&self, answer: &Result<T, GrantorError>) {
        let Some(engine) = &self.engine else { return };
        match answer {
            Err(GrantorError::Unreachable(_)) => engine.note_grantor_unreachable(),
            _ => engine.note_grantor_answered(self.clock.now()),
        }
    }

    async fn acquired(
        &mut self,
        req: AcquireRequest,
        answer: Result<pb::AcquireResponse, GrantorError>,
        sent_at: Nanos,
    ) {
        self.note_answer(&answer);
        let retry_at = sent_at.saturating_add_ns(self.cfg.retry_ms * NS_PER_MS);
        match answer {
            Ok(pb::AcquireResponse {
                lease: Some(lease), ..
            }) if self.verified(&lease) => self.start(req, lease, sent_at),
            Ok(pb::AcquireResponse {
                lease: Some(lease), ..
            }) => {
                // Never spent, so given straight back: the credit is not lost to the others.
                req.slot.set_state(SlotState::Denied);
                let r = pb::ReleaseRequest {
                    holder_id: self.cfg.holder_id.clone(),
                    lease_id: lease.lease_id,
                    final_used: 0,
                    request_id: self.request_id(),
                    ..Default::default()
                };
                let _ = self.grantor.release(r).await;
                self.waiting.push((req, retry_at));
            }
            Ok(denied) => {
                tracing::debug!(policy = %req.policy_id, key = %req.key, reason = denied.deny_reason, "lease denied for now");
                self.counters.denials += 1;
                let wait = wait_after_denial_ms(denied.retry_after_ms, self.cfg.retry_ms)
                    .saturating_mul(NS_PER_MS);
                let retry_at = sent_at.saturating_add_ns(wait);
                req.slot.deny_until(retry_at.0);
                self.waiting.push((req, retry_at));
            }
            Err(GrantorError::Unreachable(why)) => {
                tracing::warn!(policy = %req.policy_id, key = %req.key, %why, "grantor unreachable");
                self.counters.unreachable += 1;
                req.slot.set_state(SlotState::Unreachable);
                self.waiting.push((req, retry_at));
            }
            Err(GrantorError::StaleRequest { last }) => {
                // Nothing was applied: ask again next round with an id above the last seen.
                self.continue_above(last);
                self.waiting.push((req, sent_at));
            }
            Err(GrantorError::Refused { code, message }) => {
                tracing::warn!(policy = %req.policy_id, key = %req.key, ?code, %message, "lease refused");
                self.counters.denials += 1;
                req.slot.set_state(SlotState::Denied);
                self.waiting.push((req, retry_at));
            }
        }
    }

    /// Whether `lease` carries a valid signature of a trusted key (always, without keys).
    pub(super) fn verified(&mut self, lease: &pb::Lease) -> bool {
        let Some(verifier) = &self.cfg.verifier else {
            return true;
        };
        match verifier.verify(&leasehold_client::wire::lease_from_pb(lease)) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(lease_id = lease.lease_id, error = %e, "lease signature refused; not spending it");
                self.counters.bad_signatures += 1;
                false
            }
        }
    }

    /// Takes a granted lease into the books. Its credit reaches the slot in
    /// [`LeaseManager::top_up`], once a mark allows it.
    pub(super) fn start(&mut self, req: AcquireRequest, lease: pb::Lease, sent_at: Nanos) {
        let deadline = self.cfg.holder.deadline(sent_at, lease.ttl_ms);
        tracing::debug!(policy = %req.policy_id, key = %req.key, lease_id = lease.lease_id, credit = lease.credit, ttl_ms = lease.ttl_ms, "lease started");
        req.slot.deposit(0, deadline.0);
        req.slot.set_state(SlotState::Active);
        let counts_base = req.slot.acknowledged();
        let held = Held {
            policy_id: Arc::clone(&req.policy_id),
            key: req.key.clone(),
            offered_at_report: req.slot.offered(),
            slot: req.slot,
            lease_id: lease.lease_id,
            generation: lease.generation,
            credit: lease.credit,
            returned: 0,
            deposited: 0,
            withdrawn: 0,
            mark: if self.store.is_some() {
                0
            } else {
                MARK_UNBOUNDED
            },
            reported_used: 0,
            last_report: sent_at,
            deadline,
            ttl_ns: lease.ttl_ms.saturating_mul(NS_PER_MS),
            pinned: false,
            ask_again_at: Nanos::ZERO,
            priority: req.priority,
            reported_demand: 0,
            counts_base,
            counts_sent: SlotCounts::default(),
        };
        // Spendable at once where no durable mark holds it back: waiting for the next
        // round's top-up would refuse the requests of that gap as over the limit.
        let now_spendable = super::marks::Allowance {
            credit: held.credit,
            in_slot: 0,
            mark: held.mark,
        }
        .depositable();
        let mut held = held;
        if now_spendable > 0 {
            held.deposited += now_spendable;
            held.slot.deposit(now_spendable, deadline.0);
        }
        self.held
            .insert((held.policy_id.clone(), held.key.clone()), held);
    }

    /// Releases every lease (graceful shutdown).
    pub async fn release_all(&mut self) {
        let all = std::mem::take(&mut self.held);
        if !self.reserve_request_ids(all.len() as u64).await {
            // Without ids on disk a release could repeat an old id; the leases expire.
            for h in all.into_values() {
                h.slot.close();
            }
            return;
        }
        self.release_all_of(all.into_values().collect()).await;
        self.commit_pending().await;
    }
}

/// Where a run's request ids start without a state file: the wall clock in nanoseconds, so
/// a restarted agent keeps above the ids of its previous runs (the grantor refuses an id
/// lower than one it has seen from the holder). A state file continues from what it
/// recorded instead.
fn request_ids_start() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 2))
}
