//! Skewed, shifting synthetic demand: Zipf weights over the active agents, whose ranking
//! rotates. Traffic generation is the simulation's input, not a decision, so it may use
//! floating point; every admission decision stays in integers.

use super::HierarchyConfig;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

pub struct Traffic {
    /// Offered units per second, total.
    total_per_sec: f64,
    exponent: f64,
    /// Agents `0..active` take traffic.
    active: usize,
    hot_spot_every_ns: u64,
    /// rank[i] = agent i's position in the Zipf ranking (for i < active).
    rank: Vec<usize>,
    /// Zipf weight of each rank, normalised to sum to one.
    share: Vec<f64>,
    next_shuffle_ns: u64,
}

impl Traffic {
    pub fn new(cfg: &HierarchyConfig) -> Self {
        let mut t = Traffic {
            total_per_sec: 0.0,
            exponent: cfg.zipf_exponent_pct as f64 / 100.0,
            active: 0,
            hot_spot_every_ns: cfg.hot_spot_every_s * 1_000_000_000,
            rank: Vec::new(),
            share: Vec::new(),
            next_shuffle_ns: 0,
        };
        t.set_load(cfg.rate_per_sec, cfg.load_factor_pct);
        t.set_active(cfg.initially_active());
        t
    }

    /// Offered load: `load_factor_pct` percent of `rate_per_sec`.
    pub fn set_load(&mut self, rate_per_sec: u64, load_factor_pct: u64) {
        self.total_per_sec = rate_per_sec as f64 * load_factor_pct as f64 / 100.0;
    }

    /// Spreads traffic over agents `0..active`; the hot spots move at the next step.
    pub fn set_active(&mut self, active: usize) {
        self.active = active;
        self.rank = (0..active).collect();
        let raw: Vec<f64> = (1..=active)
            .map(|k| 1.0 / (k as f64).powf(self.exponent))
            .collect();
        let norm: f64 = raw.iter().sum();
        self.share = raw.iter().map(|w| w / norm).collect();
        self.next_shuffle_ns = 0;
    }

    pub fn active(&self) -> usize {
        self.active
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
        match self.rank.get(id) {
            Some(&r) => self.total_per_sec * self.share[r],
            None => 0.0,
        }
    }

    /// Units offered at agent `id` during one step: the expected amount, randomly rounded
    /// so the long-run mean is exact.
    pub fn offered(&self, id: usize, step_ns: u64, rng: &mut ChaCha8Rng) -> u64 {
        if id >= self.active {
            return 0;
        }
        let expected = self.rate_of(id) * step_ns as f64 / 1e9;
        let whole = expected.floor();
        let extra = u64::from(rng.random::<f64>() < expected - whole);
        whole as u64 + extra
    }
}
