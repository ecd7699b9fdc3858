//! What the engine answers: allowed or not, and why, per dimension.

use super::results::Results;
use super::table::Entry;
use leasehold_common::time::Nanos;
use smallvec::SmallVec;
use std::sync::Arc;

/// Most dimensions one request may carry; results are kept inline up to this many, so no
/// decision allocates.
pub const DIMENSIONS_LIMIT: usize = 8;

/// Why a dimension (or the whole request) was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// The limit is spent: no leased credit left, or the local algorithm is full.
    OverLimit,
    /// The request costs more than the policy can ever hold.
    CostAboveCapacity,
    /// The key's first lease has been asked for and has not arrived yet.
    AwaitingLease,
    /// The grantor refused credit for now.
    LeaseRefused,
    /// The grantor is unreachable and the policy fails closed (or its cached lease ran out).
    Unreachable,
    /// Restricted: the priority is below the minimum, or the emergency rate is spent.
    Restricted,
    /// The key could not be built and the policy has no overflow for it.
    InvalidKey,
    /// An envoyproxy/ratelimit rule with `requests_per_unit: 0`.
    ZeroLimit,
    /// The engine's own self-protection bucket is empty (no dimension was checked).
    SelfProtection,
    /// More dimensions than the engine accepts (no dimension was checked).
    TooManyDimensions,
    /// The acquire queue is full, so the key's lease cannot be asked for yet.
    AcquireQueueFull,
    /// The dimension names a policy id the rule set does not have, and the engine's
    /// [`UnknownPolicy`](super::UnknownPolicy) setting is `Deny`.
    UnknownPolicy,
}

/// What happened to one dimension.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Charged against the limit.
    Admitted,
    /// Refused; the request is refused.
    Denied(DenyReason),
    /// Would have been refused, but the policy is in shadow mode: admitted, not charged.
    ShadowDenied(DenyReason),
    /// Admitted uncharged because the grantor is unreachable (or an operator said so) and
    /// the policy fails open.
    FailOpen,
    /// Admitted under restricted operation, charged to the local emergency rate.
    Restricted,
    /// Admitted: the policy's kill switch is on.
    KillSwitch,
    /// No rule limits this descriptor (or the policy id is unknown and the engine allows
    /// unknown ids): not limited.
    NoRule,
    /// An envoyproxy/ratelimit rule with `unlimited: true`.
    Unlimited,
    /// Another dimension of the request names this rule in its `replaces`.
    Replaced,
    /// The key could not be built; the request is refused (shadow mode reports
    /// `ShadowDenied(InvalidKey)` instead).
    InvalidKey,
    /// Not checked because an earlier dimension refused the request.
    Skipped,
    /// Admitted here, then given back because a later dimension refused the request.
    RolledBack,
}

impl Outcome {
    /// Whether this dimension lets the request through.
    pub fn allows(self) -> bool {
        !matches!(
            self,
            Outcome::Denied(_) | Outcome::InvalidKey | Outcome::Skipped | Outcome::RolledBack
        )
    }
}

/// Longest policy id a [`PolicyId`] holds inline.
pub const POLICY_ID_INLINE_MAX: usize = 23;

/// A policy id in a decision. Ids of up to [`POLICY_ID_INLINE_MAX`] bytes are copied
/// inline, so putting them in a decision writes no reference count that every thread
/// deciding for the policy shares; longer ids share the policy's allocation.
#[derive(Clone)]
pub struct PolicyId(Repr);

#[derive(Clone)]
enum Repr {
    Inline(InlineId),
    Shared(Arc<str>),
}

/// An inline id, aligned so that a copy moves whole words: copied in odd-sized pieces
/// through a temporary, an id makes the next read of those bytes wait (a store-forwarding
/// stall costs more than the rest of the copy).
#[derive(Copy, Clone)]
#[repr(C, align(8))]
struct InlineId {
    bytes: [u8; POLICY_ID_INLINE_MAX],
    len: u8,
}

impl PolicyId {
    /// The id of a compiled policy whose id is `id`.
    pub(crate) fn new(id: &Arc<str>) -> PolicyId {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= POLICY_ID_INLINE_MAX => {
                let mut bytes = [0; POLICY_ID_INLINE_MAX];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                PolicyId(Repr::Inline(InlineId { bytes, len }))
            }
            _ => PolicyId(Repr::Shared(Arc::clone(id))),
        }
    }

    /// Whether dropping this id releases a reference (an id too long to keep inline).
    #[inline]
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self.0, Repr::Shared(_))
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Shared(id) => id,
            // Copied whole from a `str` in `new`, so always UTF-8.
            Repr::Inline(InlineId { bytes, len }) => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
        }
    }
}

impl PartialEq for PolicyId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for PolicyId {}

impl std::hash::Hash for PolicyId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl std::ops::Deref for PolicyId {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for PolicyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for PolicyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for PolicyId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for PolicyId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The answer for one dimension, in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimensionResult {
    /// The policy the dimension was checked against (`None` for no rule, unlimited and
    /// zero-limit Envoy rules).
    pub policy_id: Option<PolicyId>,
    pub policy_version: u64,
    pub outcome: Outcome,
    /// The policy's capacity (burst, window limit, quota or in-flight maximum); 0 if none.
    pub limit: u64,
    /// Units left for the caller's own key right after this decision (for leased credit:
    /// what this agent holds). An observation, not a reservation.
    pub remaining: u64,
    /// Nanoseconds until the limit is whole again (window end, bucket full), best effort.
    pub reset_after_ns: u64,
}

/// The refusal that decided a denied request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// Index of the refusing dimension; `None` for engine-wide refusals.
    pub dimension: Option<usize>,
    pub reason: DenyReason,
}

/// The engine's answer to one request.
#[derive(Debug)]
pub struct Decision {
    pub allowed: bool,
    /// Unique within the engine instance, for support and logs.
    pub decision_id: u64,
    /// On refusal, when the same request could succeed if nothing else spends; 0 when
    /// allowed, `u64::MAX` when it never can.
    pub retry_after_ns: u64,
    pub denial: Option<Denial>,
    /// When allowed by a shaping policy: nanoseconds to wait before the request goes (its
    /// units are charged at that time). 0: go now.
    pub delay_ns: u64,
    /// The engine's monotonic time at which a delayed request goes; zero without delay.
    pub departs_at: Nanos,
    pub results: Results,
    /// Units held against concurrency limits; released when dropped.
    pub in_flight: InFlight,
}

impl Decision {
    /// A refusal with no results, to be filled by
    /// [`Engine::admit_into`](super::Engine::admit_into).
    pub fn new() -> Self {
        Decision {
            allowed: false,
            decision_id: 0,
            retry_after_ns: 0,
            denial: None,
            delay_ns: 0,
            departs_at: Nanos::ZERO,
            results: Results::new(),
            in_flight: InFlight::default(),
        }
    }

    /// Back to [`Decision::new`], giving back any concurrency units still held.
    pub fn reset(&mut self) {
        self.allowed = false;
        self.decision_id = 0;
        self.retry_after_ns = 0;
        self.denial = None;
        self.delay_ns = 0;
        self.departs_at = Nanos::ZERO;
        self.results.clear();
        self.in_flight.release();
    }
}

impl Default for Decision {
    fn default() -> Self {
        Decision::new()
    }
}

/// Units a request holds against concurrency limits. Keep it alive while the request is in
/// flight; dropping it (or calling [`release`](Self::release)) gives the units back.
#[derive(Debug, Default)]
pub struct InFlight {
    held: SmallVec<[(Arc<Entry>, u64); 2]>,
}

impl InFlight {
    pub(crate) fn push(&mut self, entry: Arc<Entry>, units: u64) {
        self.held.push((entry, units));
    }

    /// Whether any concurrency units are held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Gives the units back now.
    #[inline]
    pub fn release(&mut self) {
        if !self.held.is_empty() {
            self.release_held();
        }
    }

    #[cold]
    fn release_held(&mut self) {
        for (entry, units) in self.held.drain(..) {
            entry.release_in_flight(units);
        }
    }
}

impl Drop for InFlight {
    /// Inline: most decisions hold nothing, and a call costs more than the check.
    #[inline]
    fn drop(&mut self) {
        self.release();
    }
}

// Decisions keep every result inline: a larger result makes every decision bigger (and
// `admit` copies the whole decision out).
const _: () = assert!(std::mem::size_of::<Option<PolicyId>>() <= 32);
const _: () = assert!(std::mem::size_of::<DimensionResult>() <= 72);
// Returned by value from `Engine::admit`; docs/api.md says about 700 bytes.
const _: () = assert!(std::mem::size_of::<Decision>() <= 704);
