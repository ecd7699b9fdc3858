//! Shaping in a policy document: the `shape` field and the rules it must keep.

use super::error::{Collector, Problem};
use super::model::{Algorithm, Enforcement, Policy};
use super::units::HumanDuration;
use serde::{Deserialize, Serialize};

/// Longest `shape.max_delay`: a caller holding a request longer than this is queueing,
/// which belongs to backpressure rather than to a limiter.
pub const SHAPE_MAX_DELAY_LIMIT: HumanDuration = HumanDuration::from_secs(60);

/// Shaping: a request the limit would refuse now, whose units are available within
/// `max_delay`, is admitted and charged now with a delay to wait before it goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    pub max_delay: HumanDuration,
}

/// A delay is honoured only where this process schedules the units itself: the algorithm
/// must have a time at which refused units become available, and the decision must be
/// made here rather than by an allocator.
pub(super) fn check(p: &Policy, c: &mut Collector) {
    let Some(shape) = p.shape else {
        return;
    };
    let delay = shape.max_delay;
    if delay.as_ns() == 0 {
        c.push("shape.max_delay", Problem::MustBePositive);
    } else if delay > SHAPE_MAX_DELAY_LIMIT {
        let problem = Problem::OutOfRange {
            value: delay.to_string(),
            range: format!("(0, {SHAPE_MAX_DELAY_LIMIT}]"),
        };
        c.push("shape.max_delay", problem);
    }
    let unsupported = |when: &str, instead: &str| Problem::Unsupported {
        value: "shape".into(),
        when: when.into(),
        instead: instead.into(),
    };
    match p.algorithm {
        Algorithm::Concurrency => c.push(
            "shape",
            unsupported(
                "for algorithm concurrency",
                "units in flight come back when requests end, not at a time a delay could wait for",
            ),
        ),
        Algorithm::CalendarQuota => c.push(
            "shape",
            unsupported(
                "for algorithm calendar_quota",
                "a spent quota comes back at the next calendar period, far beyond any delay",
            ),
        ),
        _ => {}
    }
    if p.enforcement == Enforcement::Exact {
        c.push(
            "shape",
            unsupported(
                "with enforcement exact",
                "the allocator decides each request now; remove shape or use enforcement: leased",
            ),
        );
    }
}
