//! Synthetic gateway traffic: tenants with Zipf demand, and a hot spot per tenant that moves
//! between the regions over time. A pure function of elapsed time and a seeded generator, so
//! the demand of a run is fixed by its seed; only the admissions depend on the live system.

use super::config::LiveConfig;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

const NS_PER_SEC: u128 = 1_000_000_000;
/// Zipf weights are `ZIPF_SCALE / rank`: exact integers for up to `TENANTS_MAX` tenants.
const ZIPF_SCALE: u64 = 720_720;

/// Where one synthetic request goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Pick {
    pub tenant: usize,
    pub region: usize,
    /// Agent index within the region's cell.
    pub agent: usize,
}

/// The demand of a run.
#[derive(Clone, Debug)]
pub struct Demand {
    /// Zipf weight of each tenant (tenant 0 is the heaviest).
    weights: Vec<u64>,
    weight_sum: u64,
    offered_per_sec: u64,
    regions: usize,
    agents_per_region: usize,
    hot_spot_every_ns: u64,
    hot_share_pct: u64,
}

impl Demand {
    /// The offered rate is set so the lightest tenant offers `load_pct` percent of its
    /// key's rate: every tenant then asks for more than the bound lets through.
    pub fn new(cfg: &LiveConfig, regions: usize) -> Self {
        let weights: Vec<u64> = (1..=cfg.tenants as u64).map(|k| ZIPF_SCALE / k).collect();
        let weight_sum = weights.iter().sum();
        let lightest = *weights.last().unwrap_or(&ZIPF_SCALE);
        let offered = u128::from(cfg.rate_per_sec) * u128::from(cfg.load_pct) / 100
            * u128::from(weight_sum)
            / u128::from(lightest);
        Demand {
            weights,
            weight_sum,
            offered_per_sec: u64::try_from(offered).unwrap_or(u64::MAX),
            regions: regions.max(1),
            agents_per_region: cfg.agents_per_region.max(1),
            hot_spot_every_ns: cfg.hot_spot_every_ms.max(1) * 1_000_000,
            hot_share_pct: cfg.hot_share_pct.min(100),
        }
    }

    /// Requests offered per second, all tenants together.
    pub fn offered_per_sec(&self) -> u64 {
        self.offered_per_sec
    }

    /// Requests due in total by `elapsed_ns` into the run.
    pub fn due(&self, elapsed_ns: u64) -> u64 {
        let due = u128::from(self.offered_per_sec) * u128::from(elapsed_ns) / NS_PER_SEC;
        u64::try_from(due).unwrap_or(u64::MAX)
    }

    /// The region where `tenant`'s traffic is concentrated at `elapsed_ns`: it moves to the
    /// next region every `hot_spot_every_ms`, tenants staggered so the regions' loads shift.
    pub fn hot_region(&self, tenant: usize, elapsed_ns: u64) -> usize {
        let epoch = (elapsed_ns / self.hot_spot_every_ns) as usize;
        (epoch + tenant) % self.regions
    }

    /// Draws one request: a tenant by Zipf weight, its hot region with `hot_share_pct`
    /// percent probability (else another region), an agent of that cell uniformly.
    pub fn pick(&self, elapsed_ns: u64, rng: &mut ChaCha8Rng) -> Pick {
        let mut draw = rng.random_range(0..self.weight_sum);
        let mut tenant = self.weights.len() - 1;
        for (i, w) in self.weights.iter().enumerate() {
            if draw < *w {
                tenant = i;
                break;
            }
            draw -= w;
        }
        let hot = self.hot_region(tenant, elapsed_ns);
        let region = if self.regions == 1 || rng.random_range(0..100) < self.hot_share_pct {
            hot
        } else {
            (hot + rng.random_range(1..self.regions)) % self.regions
        };
        Pick {
            tenant,
            region,
            agent: rng.random_range(0..self.agents_per_region),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn demand() -> Demand {
        let cfg = LiveConfig {
            tenants: 4,
            rate_per_sec: 300,
            load_pct: 150,
            hot_spot_every_ms: 1_000,
            hot_share_pct: 80,
            ..LiveConfig::default()
        };
        Demand::new(&cfg, 2)
    }

    #[test]
    fn the_lightest_tenant_still_offers_more_than_its_rate() {
        let d = demand();
        // Weights 12:6:4:3 of 25: the lightest offers 3/25 of the total.
        assert_eq!(d.offered_per_sec(), 300 * 150 / 100 * 25 / 3);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut per_tenant = [0u64; 4];
        let n = 50_000;
        for _ in 0..n {
            per_tenant[d.pick(0, &mut rng).tenant] += 1;
        }
        // Expected 6000 of 50 000 for the lightest; it must stay well above 1/1.5 of that.
        assert!(per_tenant[3] > 5_000, "{per_tenant:?}");
        assert!(per_tenant[0] > 3 * per_tenant[3], "{per_tenant:?}");
    }

    #[test]
    fn due_is_exact_and_monotone() {
        let d = demand();
        assert_eq!(d.due(0), 0);
        assert_eq!(d.due(1_000_000_000), d.offered_per_sec());
        let mut last = 0;
        for ms in 0..3_000u64 {
            let now = d.due(ms * 1_000_000);
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn the_hot_spot_moves_between_regions() {
        let d = demand();
        assert_eq!(d.hot_region(0, 0), 0);
        assert_eq!(d.hot_region(0, 1_000_000_000), 1);
        assert_eq!(d.hot_region(1, 0), 1);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let in_hot = (0..10_000)
            .map(|_| d.pick(0, &mut rng))
            .filter(|p| p.region == d.hot_region(p.tenant, 0))
            .count();
        assert!((7_500..8_500).contains(&in_hot), "{in_hot}");
    }
}
