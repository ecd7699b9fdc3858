//! The grantor's timeline against simulated time, for checking window budgets.
//!
//! Windows are aligned on the ledger's timeline: the leader stamps every command with a time
//! that never advances faster than real time and falls behind it across leader changes
//! (`allocator::raft::time`). Admissions are logged at true simulated time. So a window must
//! be checked on the timeline, not on true time: after a leader change the timeline lags,
//! the ledger opens the next window later than true time would, and a holder may still spend
//! the old window's credit a little past its end on true time, within its end on the
//! timeline.
//!
//! The run samples, after every step, the latest command time any running grantor node has
//! applied (its ledger's `now`), and keeps the instants where it changed. An admission at
//! simulated time `t` is placed on the timeline at `min(v + (t − s), v')`, where `v` is the
//! last value sampled at or before `t`, at `s`, and `v'` the next one. This placement is in
//! the window its credit was granted in:
//!
//! * not before the grant: the grant was applied (and sampled) before its answer reached the
//!   holder, so `v` is at least the grant's stamp `g`, and `v' ≥ v`;
//! * before the window's end `E`: the holder sent its request at or before the grant was
//!   stamped (at `t_g`) and stops spending `E − g` after sending, so `t − t_g < E − g`; `v` was
//!   stamped after the grant, no later than `s`, and the timeline never runs faster than real
//!   time, so `v ≤ g + (s − t_g)` and `v + (t − s) < E`.
//!
//! Units placed in a window were therefore all granted in it, and no window may hold more
//! than its limit.

use super::settle::Books;

/// The latest command time the grantor has applied: a single node's ledger's, or the
/// largest over a cluster's running nodes (each applies the one log, some later than
/// others); None while there is none to read or no command was applied yet.
pub(super) fn grantor_now_ns(books: &Books, up: impl Fn(usize) -> bool) -> Option<u64> {
    let now = match books {
        Books::Single(_) => books.read(up, |l| l.now().0),
        Books::Nodes(nodes) => nodes
            .each_up(up, |n| n.read_local(|s| s.ledger().now().0))
            .into_iter()
            .max(),
    };
    now.filter(|ns| *ns > 0)
}

/// The grantor's applied time, sampled against simulated time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// (simulated ns since the start, latest applied command time in ledger ns) where the
    /// latter changed, in order. At most one per simulation step, so bounded by the run's
    /// length.
    points: Vec<(u64, u64)>,
}

impl Timeline {
    /// Notes that by simulated time `at_ns` the grantor had applied commands stamped up to
    /// `ledger_ns`. Earlier or equal values change nothing: the timeline never goes back.
    pub fn observe(&mut self, at_ns: u64, ledger_ns: u64) {
        if self.points.last().is_none_or(|&(_, v)| ledger_ns > v) {
            self.points.push((at_ns, ledger_ns));
        }
    }

    /// Where simulated time `at_ns` is placed on the timeline (see the module docs); None
    /// before the grantor applied anything.
    pub fn place(&self, at_ns: u64) -> Option<u64> {
        let i = self.points.partition_point(|&(s, _)| s <= at_ns);
        let (s, v) = *self.points.get(i.checked_sub(1)?)?;
        let projected = v.saturating_add(at_ns - s);
        Some(match self.points.get(i) {
            Some(&(_, next)) => projected.min(next),
            None => projected,
        })
    }

    /// The first and last sampled values, in ledger ns.
    pub fn span(&self) -> Option<(u64, u64)> {
        Some((self.points.first()?.1, self.points.last()?.1))
    }

    /// How far the timeline fell behind true time at most, in nanoseconds, when the run
    /// started at UNIX time `start_unix_ns`.
    pub fn lag_ns_max(&self, start_unix_ns: u64) -> u64 {
        self.points
            .iter()
            .map(|&(s, v)| (start_unix_ns + s).saturating_sub(v))
            .max()
            .unwrap_or(0)
    }

    /// How far behind true time the timeline's last sample was, in nanoseconds: what a
    /// leader change left for good (the maximum also counts the election itself, while
    /// nothing was applied).
    pub fn lag_ns_at_end(&self, start_unix_ns: u64) -> u64 {
        self.points
            .last()
            .map_or(0, |&(s, v)| (start_unix_ns + s).saturating_sub(v))
    }

    /// Samples kept.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_between_samples_at_real_time_pace_up_to_the_next_value() {
        let mut t = Timeline::default();
        assert_eq!(t.place(5), None);
        t.observe(10, 1_000);
        t.observe(11, 1_000); // unchanged: not kept
        t.observe(20, 1_004); // the timeline lagged: 10 ns of real time, 4 of timeline
        t.observe(30, 1_014);
        assert_eq!(t.len(), 3);
        assert_eq!(t.place(9), None);
        assert_eq!(t.place(10), Some(1_000));
        assert_eq!(t.place(12), Some(1_002));
        assert_eq!(t.place(19), Some(1_004), "capped at the next value");
        assert_eq!(t.place(25), Some(1_009));
        assert_eq!(t.place(40), Some(1_024), "projected past the last sample");
        assert_eq!(t.lag_ns_max(990), 6, "true time 990 + s");
        assert_eq!(t.lag_ns_at_end(990), 6);
        t.observe(40, 1_030);
        assert_eq!(t.lag_ns_at_end(990), 0);
        assert_eq!(t.span(), Some((1_000, 1_030)));
    }

    #[test]
    fn placements_never_go_back() {
        let mut t = Timeline::default();
        for (s, v) in [(0, 100), (3, 101), (4, 110), (9, 111), (20, 140)] {
            t.observe(s, v);
        }
        let placed: Vec<u64> = (0..30).map(|s| t.place(s).unwrap()).collect();
        assert!(placed.windows(2).all(|w| w[0] <= w[1]), "{placed:?}");
    }
}
