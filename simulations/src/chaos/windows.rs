//! Every window of one key's admissions against `B + r·T`, from the instants the generator
//! recorded, in one pass.
//!
//! Admissions `i..=j` (in time order) break the bound when `j − i + 1 > B + r·(t_j − t_i)`.
//! Scaled by the rate's period `p` (r = u/p) that is
//! `(j+1)·p − u·t_j − (i·p − u·t_i) > B·p`, so keeping the smallest `i·p − u·t_i` seen so
//! far checks every window ending at `j` at once: n admissions, n·(n+1)/2 windows, O(n).
//!
//! The generator sees when it sent each request and when the answer came, not when the
//! agent decided; an answer can come long after the decision (an agent stopped between
//! deciding and answering). [`check_key_bracketed`] therefore places each decision anywhere
//! in its bracket: admissions `i..=j` (in answer order) were all decided within
//! `[min sent over i..=j, answered_j]`, so `j − i + 1 > B + r·(answered_j − min sent)` is
//! a violation whatever the decision instants were. With answers that come at once it is
//! [`check_key`] on the answer instants.

use leasehold_common::rate::Rate;
use serde::Serialize;

/// The outcome of checking one key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WindowCheck {
    /// Windows (pairs of first and last admission) covered.
    pub windows: u64,
    /// Admissions that end a window over the bound.
    pub violations: u64,
    /// The largest excess over the bound, in units.
    pub worst_excess: u64,
}

/// Checks admissions at `at_ns` (ascending, one unit each) against `burst + rate·T`.
pub fn check_key(at_ns: &[u64], rate: Rate, burst: u64) -> WindowCheck {
    let p = i128::from(rate.period_ns());
    let u = i128::from(rate.units());
    let limit = i128::from(burst) * p;
    let n = at_ns.len() as u64;
    let mut out = WindowCheck {
        windows: n * (n + 1) / 2,
        ..WindowCheck::default()
    };
    let mut min_start = i128::MAX;
    for (j, &t) in at_ns.iter().enumerate() {
        let t = i128::from(t);
        min_start = min_start.min(j as i128 * p - u * t);
        let worst = (j as i128 + 1) * p - u * t - min_start;
        if worst > limit {
            out.violations += 1;
            // Excess in units, rounded up: any fraction over the bound is a whole unit.
            let excess = ((worst - limit) + p - 1) / p;
            out.worst_excess = out.worst_excess.max(excess as u64);
        }
    }
    out
}

/// One segment of start indices whose earliest send time over `i..=j` is the same:
/// `first` is the smallest such `i`, the best start since it counts the most admissions.
struct Segment {
    min_sent: i128,
    first: i128,
    /// The smallest `i·p − u·min_sent` of this segment and every one below it.
    best: i128,
}

/// Checks admissions sent at `sent_ns` and answered at `answered_ns` (both in answer
/// order, one unit each) against `burst + rate·T`, each decision placed anywhere between
/// its send and its answer.
pub fn check_key_bracketed(
    sent_ns: &[u64],
    answered_ns: &[u64],
    rate: Rate,
    burst: u64,
) -> WindowCheck {
    let p = i128::from(rate.period_ns());
    let u = i128::from(rate.units());
    let limit = i128::from(burst) * p;
    let n = answered_ns.len().min(sent_ns.len()) as u64;
    let mut out = WindowCheck {
        windows: n * (n + 1) / 2,
        ..WindowCheck::default()
    };
    let mut stack: Vec<Segment> = Vec::new();
    for (j, (&s, &a)) in sent_ns.iter().zip(answered_ns).enumerate() {
        let (s, a, j) = (i128::from(s), i128::from(a), j as i128);
        // Starts whose earliest send is at or after this one now have this one's.
        let mut first = j;
        while stack.last().is_some_and(|top| top.min_sent >= s) {
            first = stack.pop().map_or(first, |top| top.first);
        }
        let below = stack.last().map_or(i128::MAX, |top| top.best);
        stack.push(Segment {
            min_sent: s,
            first,
            best: below.min(first * p - u * s),
        });
        let worst = (j + 1) * p - u * a - stack.last().map_or(i128::MAX, |top| top.best);
        if worst > limit {
            out.violations += 1;
            let excess = ((worst - limit) + p - 1) / p;
            out.worst_excess = out.worst_excess.max(excess as u64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_burst_then_the_rate_is_within_the_bound() {
        let rate = Rate::per_second(10).unwrap();
        // 5 at once (the burst), then one every 100 ms for a second.
        let mut at: Vec<u64> = vec![0; 5];
        at.extend((1..=10).map(|k| k * 100 * MS));
        let c = check_key(&at, rate, 5);
        assert_eq!(c.violations, 0, "{c:?}");
        assert_eq!(c.windows, 15 * 16 / 2);
    }

    #[test]
    fn one_unit_over_in_any_window_is_found() {
        let rate = Rate::per_second(10).unwrap();
        let mut at: Vec<u64> = vec![0; 5];
        at.extend((1..=10).map(|k| k * 100 * MS));
        // One more at 500 ms: 11 units within 500 ms, where B + r·T allows 10.
        at.push(500 * MS);
        at.sort_unstable();
        let c = check_key(&at, rate, 5);
        assert!(c.violations > 0, "{c:?}");
        assert_eq!(c.worst_excess, 1);
    }

    #[test]
    fn with_instant_answers_the_bracketed_check_is_the_plain_one() {
        let rate = Rate::per_second(10).unwrap();
        let mut at: Vec<u64> = vec![0; 5];
        at.extend((1..=10).map(|k| k * 100 * MS));
        assert_eq!(
            check_key_bracketed(&at, &at, rate, 5),
            check_key(&at, rate, 5)
        );
        at.push(500 * MS);
        at.sort_unstable();
        let c = check_key_bracketed(&at, &at, rate, 5);
        assert_eq!(c, check_key(&at, rate, 5));
        assert_eq!(c.worst_excess, 1);
    }

    #[test]
    fn a_late_answer_is_not_a_violation_but_a_late_burst_is() {
        let rate = Rate::per_second(10).unwrap();
        // The burst of 5 at 0, one of them answered only at 500 ms, and the 5 the bucket
        // holds again at 500 ms: at answer instants 6 units share the instant 500 ms, but
        // the late one may have been decided at 0, within the burst.
        let mut sent: Vec<u64> = vec![0; 5];
        sent.extend([500 * MS; 5]);
        let mut answered = sent.clone();
        answered[4] = 500 * MS;
        let plain = check_key(&answered, rate, 5);
        assert_eq!(plain.worst_excess, 1, "{plain:?}");
        let c = check_key_bracketed(&sent, &answered, rate, 5);
        assert_eq!(c.violations, 0, "{c:?}");
        // Sent at 500 ms too, the 6th unit there is over the bound wherever it was decided.
        sent[4] = 500 * MS;
        let c = check_key_bracketed(&sent, &answered, rate, 5);
        assert_eq!(c.worst_excess, 1, "{c:?}");
    }

    #[test]
    fn the_bracketed_check_finds_every_window_a_brute_force_finds() {
        use rand::{Rng, SeedableRng};
        let rate = Rate::per_second(20).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..200 {
            let n = rng.random_range(1..40);
            let mut pairs: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let s = rng.random_range(0..2_000) * MS;
                    (s, s + rng.random_range(0..300) * MS)
                })
                .collect();
            pairs.sort_by_key(|&(_, a)| a);
            let (sent, answered): (Vec<u64>, Vec<u64>) = pairs.iter().copied().unzip();
            let burst = rng.random_range(1..6);
            let fast = check_key_bracketed(&sent, &answered, rate, burst);
            // Every window i..=j, with the earliest send in it as its start.
            let mut violations = 0;
            for j in 0..pairs.len() {
                let over = (0..=j).any(|i| {
                    let start = sent[i..=j].iter().min().copied().unwrap();
                    let allowed =
                        burst as i128 * 1_000_000_000 + 20 * i128::from(answered[j] - start);
                    (j - i + 1) as i128 * 1_000_000_000 > allowed
                });
                violations += u64::from(over);
            }
            assert_eq!(fast.violations, violations, "{pairs:?} burst {burst}");
        }
    }
}
