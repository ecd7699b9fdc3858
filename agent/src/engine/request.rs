//! What a caller asks the engine: one request spending one or more dimensions.

/// Which rules one dimension of a request is checked against.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// A Leasehold policy by id.
    Policy(&'a str),
    /// An envoyproxy/ratelimit domain: the descriptor's entries pick the rule.
    Envoy { domain: &'a str },
}

/// One dimension of a request: the rules it is checked against and the descriptor entries
/// (`(key, value)` pairs) its key is built from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dimension<'a> {
    pub target: Target<'a>,
    pub entries: &'a [(&'a str, &'a str)],
}

impl<'a> Dimension<'a> {
    /// A dimension checked against the Leasehold policy `policy_id`.
    pub fn policy(policy_id: &'a str, entries: &'a [(&'a str, &'a str)]) -> Self {
        Dimension {
            target: Target::Policy(policy_id),
            entries,
        }
    }

    /// A descriptor checked against the envoyproxy/ratelimit rules of `domain`.
    pub fn envoy(domain: &'a str, entries: &'a [(&'a str, &'a str)]) -> Self {
        Dimension {
            target: Target::Envoy { domain },
            entries,
        }
    }
}

/// One request. The engine decides its cost from each policy (never from the caller): a
/// dimension costs `Cost::of(route, bytes) × hits`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AdmitRequest<'a> {
    /// Every dimension must admit, or none is charged. Results come back in this order.
    pub dimensions: &'a [Dimension<'a>],
    /// The route as the enforcer saw it, for `weighted` costs.
    pub route: Option<&'a str>,
    /// The body size as the enforcer measured it, for `bytes` costs.
    pub bytes: Option<u64>,
    /// Envoy's `hits_addend`: how many requests this call stands for; 0 checks the limit
    /// without charging it.
    pub hits: u64,
    /// Compared against `min_priority` when a policy is restricted.
    pub priority: u8,
    /// The caller waits out a delay before sending the request, so a shaping policy may
    /// admit it with one ([`Decision::delay_ns`](super::Decision::delay_ns)). Off by
    /// default: a caller that would ignore the delay is refused instead.
    pub accept_delay: bool,
    /// Who sent the request, as the API layer tells callers apart (a hash of a peer
    /// address or certificate name; 0: unknown). First leases of new keys are shared out
    /// between sources, so one caller spraying keys cannot hold back another's.
    pub source: u32,
}

impl<'a> AdmitRequest<'a> {
    /// A request of one hit at priority 0 with no route or size.
    pub fn new(dimensions: &'a [Dimension<'a>]) -> Self {
        AdmitRequest {
            dimensions,
            route: None,
            bytes: None,
            hits: 1,
            priority: 0,
            accept_delay: false,
            source: 0,
        }
    }
}
