//! P3 on the enforcers: nothing is admitted against credit once the lease it came from
//! has expired.
//!
//! Every version of a lease (a grant or a renewal) is noted when its holder receives it
//! ([`super::receipts`]); the grantor issued it earlier, so on the true clock it expires no
//! later than its arrival plus its TTL. A charged admission is within its lease's life when
//! some version the agent received at or before the admission is still valid then, with
//! the grantor's write-off grace added: the grantor takes the credit back only after that.
//! The check is lenient by a one-way network delay (arrival rather than issue), never
//! strict; a holder whose clock ran slow, or that ignored its deadline, spends later than
//! that and is caught.

use super::check::Admission;
use super::receipts::{LeaseReceipts, LeaseVersion};
use serde::Serialize;

/// What the grantor allows past a lease's expiry before it writes the lease off, in
/// nanoseconds (the ledger's write-off grace).
pub const GRACE_NS: u64 = 1_000_000_000;

/// Charged admissions made with no unexpired lease in hand.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExpiryCheck {
    /// Charged admissions checked.
    pub checked: u64,
    /// Admissions outside every lease version the agent had received.
    pub violations: u64,
    /// The first few: (agent, instant in nanoseconds, how late past the latest deadline).
    pub first: Vec<(u32, u64, u64)>,
}

const KEPT_MAX: usize = 8;

/// Checks every admission of `admissions` (sorted by time) against the lease versions its
/// agent received.
pub fn check_expiry(
    admissions: &[Admission],
    receipts: &LeaseReceipts,
    agents: usize,
) -> ExpiryCheck {
    let mut out = ExpiryCheck::default();
    for agent in 0..agents as u32 {
        let mut versions = receipts.versions(agent);
        versions.sort_unstable_by_key(|v| v.received_ns);
        let mut cover = Cover::new(&versions);
        for a in admissions.iter().filter(|a| a.agent == agent) {
            out.checked += 1;
            let deadline = cover.deadline_at(a.at_ns);
            if deadline.is_none_or(|d| a.at_ns > d.saturating_add(GRACE_NS)) {
                out.violations += 1;
                if out.first.len() < KEPT_MAX {
                    let late = deadline.map_or(a.at_ns, |d| a.at_ns - d);
                    out.first.push((agent, a.at_ns, late));
                }
            }
        }
    }
    out
}

/// The latest deadline among versions received up to an instant, for instants in order.
struct Cover<'a> {
    versions: &'a [LeaseVersion],
    next: usize,
    deadline: Option<u64>,
}

impl<'a> Cover<'a> {
    fn new(versions: &'a [LeaseVersion]) -> Self {
        Cover {
            versions,
            next: 0,
            deadline: None,
        }
    }

    fn deadline_at(&mut self, at_ns: u64) -> Option<u64> {
        while let Some(v) = self
            .versions
            .get(self.next)
            .filter(|v| v.received_ns <= at_ns)
        {
            let d = v.received_ns.saturating_add(v.ttl_ns);
            self.deadline = Some(self.deadline.map_or(d, |x| x.max(d)));
            self.next += 1;
        }
        self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at(agent: u32, ms: u64) -> Admission {
        Admission {
            at_ns: ms * MS,
            agent,
        }
    }

    #[test]
    fn admissions_past_every_deadline_and_its_grace_are_caught() {
        let receipts = LeaseReceipts::default();
        receipts.note_version_at(0, 1, 0, 100 * MS, 2_000);
        receipts.note_version_at(0, 1, 5, 1_500 * MS, 2_000);
        // Covered by the renewal received at 1.5 s until 3.5 s, plus a second of grace.
        let ok = [at(0, 100), at(0, 3_000), at(0, 4_500)];
        assert_eq!(check_expiry(&ok, &receipts, 1).violations, 0);
        let late = [at(0, 4_501)];
        let c = check_expiry(&late, &receipts, 1);
        assert_eq!((c.checked, c.violations), (1, 1));
        assert_eq!(c.first, vec![(0, 4_501 * MS, 1_001 * MS)]);
        // Before any lease arrived, and for an agent that never had one.
        assert_eq!(
            check_expiry(&[at(0, 50), at(1, 200)], &receipts, 2).violations,
            2
        );
    }
}
