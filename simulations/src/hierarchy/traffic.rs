//! Skewed, shifting synthetic demand: Zipf weights over agents whose ranking rotates.

use super::HierarchyConfig;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

pub struct Traffic {
    /// Offered units per second, total.
    total_per_sec: f64,
    exponent: f64,
    agents: usize,
    hot_spot_every_ns: u64,
    /// rank[i] = agent i's position in the Zipf ranking.
    rank: Vec<usize>,
    next_shuffle_ns: u64,
}

impl Traffic {
    pub fn new(cfg: &HierarchyConfig) -> Self {
        let agents = cfg.regions * cfg.agents_per_region;
        Traffic {
            total_per_sec: cfg.rate_per_sec as f64 * cfg.load_factor_pct as f64 / 100.0,
            exponent: cfg.zipf_exponent_pct as f64 / 100.0,
            agents,
            hot_spot_every_ns: cfg.hot_spot_every_s * 1_000_000_000,
            rank: (0..agents).collect(),
            next_shuffle_ns: 0,
        }
    }

    /// Moves the hot spots when it is time: a seeded shuffle of the ranking.
    pub fn advance(&mut self, now_ns: u64, rng: &mut ChaCha8Rng) {
        if now_ns < self.next_shuffle_ns {
            return;
        }
        self.next_shuffle_ns = now_ns + self.hot_spot_every_ns;
        for i in (1..self.rank.len()).rev() {
            let j = rng.random_range(0..=i);
            self.rank.swap(i, j);
        }
    }

    /// Expected offered units per second at agent `id`.
    pub fn rate_of(&self, id: usize) -> f64 {
        let norm: f64 = (1..=self.agents)
            .map(|k| 1.0 / (k as f64).powf(self.exponent))
            .sum();
        let w = 1.0 / ((self.rank[id] + 1) as f64).powf(self.exponent);
        self.total_per_sec * w / norm
    }

    /// Units offered at agent `id` during one step: the expected amount, randomly rounded
    /// so the long-run mean is exact.
    pub fn offered(&self, id: usize, step_ns: u64, rng: &mut ChaCha8Rng) -> u64 {
        let expected = self.rate_of(id) * step_ns as f64 / 1e9;
        let whole = expected.floor();
        let extra = u64::from(rng.random::<f64>() < expected - whole);
        whole as u64 + extra
    }
}
