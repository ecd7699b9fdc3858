//! What the driver offered and what the agents admitted: counts per agent, and every
//! admission's time per tenant key in fixed buckets for the window check.

use serde::Serialize;

/// Most buckets per key: the window check is quadratic in their number.
pub const BUCKETS_MAX: u64 = 4_000;
/// Finest bucket.
pub const BUCKET_NS_MIN: u64 = 10_000_000;

/// Offered, admitted and rejected requests at one level.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.offered += other.offered;
        self.admitted += other.admitted;
        self.rejected += other.rejected;
    }
}

/// The run's record.
#[derive(Clone, Debug)]
pub struct Tally {
    /// `agents[region][agent]`.
    agents: Vec<Vec<Counts>>,
    /// `admitted[tenant][bucket]`: admissions per key, by time since the start of traffic.
    admitted: Vec<Vec<u64>>,
    bucket_ns: u64,
}

impl Tally {
    /// A record for a run of `duration_ns`, with buckets small enough to keep at most
    /// [`BUCKETS_MAX`] per key.
    pub fn new(regions: usize, agents_per_region: usize, tenants: usize, duration_ns: u64) -> Self {
        let bucket_ns = duration_ns.div_ceil(BUCKETS_MAX).max(BUCKET_NS_MIN);
        // One spare bucket: the driver's last tick may land just past the end.
        let buckets = duration_ns.div_ceil(bucket_ns) as usize + 1;
        Tally {
            agents: vec![vec![Counts::default(); agents_per_region]; regions],
            admitted: vec![vec![0; buckets]; tenants],
            bucket_ns,
        }
    }

    pub fn bucket_ns(&self) -> u64 {
        self.bucket_ns
    }

    /// Records one offered request and the agent's answer at `elapsed_ns`.
    pub fn record(
        &mut self,
        region: usize,
        agent: usize,
        tenant: usize,
        elapsed_ns: u64,
        admitted: bool,
    ) {
        let c = &mut self.agents[region][agent];
        c.offered += 1;
        if admitted {
            c.admitted += 1;
            let series = &mut self.admitted[tenant];
            let i = ((elapsed_ns / self.bucket_ns) as usize).min(series.len() - 1);
            series[i] += 1;
        } else {
            c.rejected += 1;
        }
    }

    pub fn agent(&self, region: usize, agent: usize) -> Counts {
        self.agents[region][agent]
    }

    pub fn region(&self, region: usize) -> Counts {
        let mut c = Counts::default();
        for a in &self.agents[region] {
            c.add(*a);
        }
        c
    }

    pub fn total(&self) -> Counts {
        let mut c = Counts::default();
        for r in 0..self.agents.len() {
            c.add(self.region(r));
        }
        c
    }

    /// Admissions of `tenant` per bucket.
    pub fn series(&self, tenant: usize) -> &[u64] {
        &self.admitted[tenant]
    }

    pub fn tenants(&self) -> usize {
        self.admitted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_sum_their_agents_and_series_their_admissions() {
        let mut t = Tally::new(2, 2, 1, 1_000_000_000);
        assert_eq!(t.bucket_ns(), BUCKET_NS_MIN);
        t.record(0, 0, 0, 5_000_000, true);
        t.record(0, 1, 0, 15_000_000, false);
        t.record(1, 1, 0, 15_000_000, true);
        t.record(1, 1, 0, 5_000_000_000, true);
        assert_eq!(
            t.region(0),
            Counts {
                offered: 2,
                admitted: 1,
                rejected: 1
            }
        );
        assert_eq!(t.total().admitted, 3);
        let s = t.series(0);
        assert_eq!((s[0], s[1], s[s.len() - 1]), (1, 1, 1));
    }

    #[test]
    fn long_runs_get_coarser_buckets() {
        let t = Tally::new(1, 1, 1, 3_600_000_000_000);
        assert_eq!(t.bucket_ns(), 900_000_000);
        assert!(t.series(0).len() as u64 <= BUCKETS_MAX + 1);
    }
}
