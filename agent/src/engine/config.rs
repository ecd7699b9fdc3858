//! Engine settings and the builder.

use super::decision::DIMENSIONS_LIMIT;
use super::protect::SelfProtection;
use super::rules::EngineError;
use leasehold_common::key::KEY_LEN_MAX_DEFAULT;
use leasehold_common::time::Nanos;
use std::sync::Arc;

/// Default most keys held: 2^20, so that a million users per agent each get a key of their
/// own although keys spread over the shards unevenly (a shard holds 16 384, about six
/// standard deviations above its mean share of a million).
pub const KEYS_MAX_DEFAULT: usize = 1 << 20;
/// Default number of key-table shards.
pub const SHARDS_DEFAULT: usize = 64;
/// Default most queued first-lease requests.
pub const ACQUIRE_QUEUE_MAX_DEFAULT: usize = 4_096;
/// Default time after which an unused key whose state lives elsewhere (leased, or decided
/// per request) may be dropped; a local key goes only once at rest.
pub const KEY_IDLE_NS_DEFAULT: u64 = 60_000_000_000;
/// Default longest key of an envoyproxy/ratelimit rule, in bytes once encoded: values are
/// keyed as given, and a URL path or a few long header values must be counted rather than
/// refused; the bound keeps one key's memory in check.
pub const ENVOY_KEY_LEN_MAX_DEFAULT: usize = 4096;
/// Default longest wait for a key's first lease before the failure behaviour applies.
pub const ACQUIRE_WAIT_MAX_NS_DEFAULT: u64 = 250_000_000;

/// Default most requests admitted with a delay (shaped) waiting at once.
pub const SHAPED_WAITING_MAX_DEFAULT: usize = 1_024;

/// Bounds on everything the engine holds (P4).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EngineLimits {
    /// Most keys in the key table; overflow keys are kept apart and not counted.
    pub keys_max: usize,
    /// Key-table shards (at most `keys_max`).
    pub shards: usize,
    /// Most dimensions per request, 1 to [`DIMENSIONS_LIMIT`].
    pub dimensions_max: usize,
    /// Most first-lease requests waiting for the lease manager.
    pub acquire_queue_max: usize,
    /// A leased or per-request key unused this long may be dropped (a local one only once
    /// forgetting it changes no answer).
    pub key_idle_ns: u64,
    /// A key waiting this long for its first lease is treated as unreachable.
    pub acquire_wait_max_ns: u64,
    /// Longest key of a Leasehold policy, in bytes.
    pub key_len_max: usize,
    /// Longest key of an envoyproxy/ratelimit rule, in bytes once encoded (a descriptor
    /// whose key would be longer is answered OVER_LIMIT).
    pub envoy_key_len_max: usize,
    /// Most requests admitted with a delay by shaping policies and not departed yet; one
    /// more is refused as if the policy did not shape. 0 turns shaping off.
    pub shaped_waiting_max: usize,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            keys_max: KEYS_MAX_DEFAULT,
            shards: SHARDS_DEFAULT,
            dimensions_max: DIMENSIONS_LIMIT,
            acquire_queue_max: ACQUIRE_QUEUE_MAX_DEFAULT,
            key_idle_ns: KEY_IDLE_NS_DEFAULT,
            acquire_wait_max_ns: ACQUIRE_WAIT_MAX_NS_DEFAULT,
            key_len_max: KEY_LEN_MAX_DEFAULT,
            envoy_key_len_max: ENVOY_KEY_LEN_MAX_DEFAULT,
            shaped_waiting_max: SHAPED_WAITING_MAX_DEFAULT,
        }
    }
}

impl EngineLimits {
    pub(crate) fn check(&self) -> Result<(), EngineError> {
        let bad = |field, reason: String| Err(EngineError::Setting { field, reason });
        if self.keys_max == 0 {
            return bad("keys_max", "must be positive".into());
        }
        if self.shards == 0 {
            return bad("shards", "must be positive".into());
        }
        if !(1..=DIMENSIONS_LIMIT).contains(&self.dimensions_max) {
            return bad(
                "dimensions_max",
                format!("{} is outside 1..={DIMENSIONS_LIMIT}", self.dimensions_max),
            );
        }
        if self.acquire_queue_max == 0 {
            return bad("acquire_queue_max", "must be positive".into());
        }
        if self.key_idle_ns == 0 {
            return bad("key_idle_ns", "must be positive".into());
        }
        if self.key_len_max == 0 {
            return bad("key_len_max", "must be positive".into());
        }
        if self.envoy_key_len_max == 0 {
            return bad("envoy_key_len_max", "must be positive".into());
        }
        Ok(())
    }
}

/// What a dimension naming a policy id the rule set does not have gets.
///
/// Native and HTTP callers name policies explicitly, so an unknown id is usually a typo or
/// a policy not yet delivered: refusing keeps a mistake from quietly admitting everything.
/// envoyproxy/ratelimit descriptors are unaffected: a descriptor no rule matches is
/// always `NoRule`, as in envoyproxy/ratelimit.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownPolicy {
    /// Refuse with [`DenyReason::UnknownPolicy`](super::DenyReason::UnknownPolicy).
    #[default]
    Deny,
    /// Admit uncharged as [`Outcome::NoRule`](super::Outcome::NoRule).
    Allow,
}

impl UnknownPolicy {
    /// The setting's name in configuration (`deny`, `allow`).
    pub fn name(self) -> &'static str {
        match self {
            UnknownPolicy::Deny => "deny",
            UnknownPolicy::Allow => "allow",
        }
    }
}

impl std::str::FromStr for UnknownPolicy {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, EngineError> {
        match s {
            "deny" => Ok(UnknownPolicy::Deny),
            "allow" => Ok(UnknownPolicy::Allow),
            other => Err(EngineError::Setting {
                field: "unknown_policy",
                reason: format!("'{other}' is not one of deny, allow"),
            }),
        }
    }
}

/// Reads wall-clock time: for calendar quotas, `effective_at`, and where windows start
/// (aligned to UNIX time).
pub type WallClock = Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>;

/// Builds an [`Engine`](super::Engine).
#[derive(Clone)]
pub struct EngineBuilder {
    pub(crate) limits: EngineLimits,
    pub(crate) instance_id: u32,
    pub(crate) self_protection: Option<SelfProtection>,
    pub(crate) wall_clock: WallClock,
    pub(crate) start: Nanos,
    pub(crate) unknown_policy: UnknownPolicy,
    pub(crate) envoy_count_denied: bool,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            limits: EngineLimits::default(),
            instance_id: 0,
            self_protection: None,
            wall_clock: Arc::new(jiff::Timestamp::now),
            start: Nanos::ZERO,
            unknown_policy: UnknownPolicy::default(),
            envoy_count_denied: true,
        }
    }
}

/// Bits of a decision id taken by the instance id; the rest count decisions.
pub(crate) const INSTANCE_BITS: u32 = 24;

impl EngineBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn limits(mut self, limits: EngineLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Identifies this engine instance in decision ids (its low 24 bits are used).
    pub fn instance_id(mut self, id: u32) -> Self {
        self.instance_id = id & ((1 << INSTANCE_BITS) - 1);
        self
    }

    /// Limits the decisions this instance takes on, independent of any policy.
    pub fn self_protection(mut self, settings: SelfProtection) -> Self {
        self.self_protection = Some(settings);
        self
    }

    /// The wall clock read by calendar quotas, `effective_at` and window alignment
    /// (default: the system's). Read once at [`build`](Self::build) against
    /// [`start`](Self::start) to place monotonic readings on the UNIX timeline.
    pub fn wall_clock(
        mut self,
        clock: impl Fn() -> jiff::Timestamp + Send + Sync + 'static,
    ) -> Self {
        self.wall_clock = Arc::new(clock);
        self
    }

    /// What dimensions naming an unknown policy id get (default: refused).
    pub fn unknown_policy(mut self, setting: UnknownPolicy) -> Self {
        self.unknown_policy = setting;
        self
    }

    /// Whether envoyproxy/ratelimit rules count hits they refuse (default: yes, as that
    /// service does unless its `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` is set). Counted,
    /// a refused hit of 5 keeps a later hit of 1 out of the same window too.
    pub fn envoy_count_denied(mut self, count: bool) -> Self {
        self.envoy_count_denied = count;
        self
    }

    /// The monotonic time the engine starts at; earlier readings are clamped to it.
    pub fn start(mut self, now: Nanos) -> Self {
        self.start = now;
        self
    }
}
