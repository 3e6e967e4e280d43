//! The Random replicator (DeToNATION paper, "Replication Schemes"): every
//! member draws the same index set from an RNG seeded by (seed, step), so
//! no index travels and the bytes buy twice the values of DeMo's pairs.
//!
//! ```text
//! 2. delta <- beta delta + lr g
//! 4. I <- m distinct indices drawn by RNG(seed, t)     identical on every member
//! 5. v <- delta[I];  delta[I] <- delta[I] - v          (v as the wire carries it)
//! 6. v <- all-reduce mean of v over the replication group
//! 7. Q <- 0;  Q[I] <- v
//! ```

use super::{Budget, Exchange, Replicator};
use crate::comm::WireDtype;
use crate::runtime::Group;
use anyhow::Result;
use rand::{Rng, SeedableRng};

/// The Random replicator of one shard.
pub struct RandomReplicator {
    beta: f32,
    /// Values sent per step.
    m: usize,
    seed: u64,
    group: Group,
    wire: WireDtype,
    delta: Vec<f32>,
    /// This step's indices (ascending).
    picked: Vec<usize>,
    /// Marks during the draw.
    taken: Vec<bool>,
    values: Option<Vec<f32>>,
}

/// `m` distinct indices of `0..n` from `rng` (Floyd's algorithm), ascending.
pub fn draw(rng: &mut impl Rng, n: usize, m: usize, taken: &mut [bool], out: &mut Vec<usize>) {
    out.clear();
    for j in n - m..n {
        let t = rng.random_range(0..=j);
        let pick = if taken[t] { j } else { t };
        taken[pick] = true;
        out.push(pick);
    }
    out.iter().for_each(|&i| taken[i] = false);
    out.sort_unstable();
}

impl RandomReplicator {
    /// `m` values per step of a shard of `len`, over `group`.
    pub fn new(beta: f32, m: usize, seed: u64, len: usize, group: Group, wire: WireDtype) -> Self {
        RandomReplicator {
            beta,
            m,
            seed,
            group,
            wire,
            delta: vec![0.0; len],
            picked: Vec::with_capacity(m),
            taken: vec![false; len],
            values: Some(vec![0.0; m]),
        }
    }

    /// The indices of step `t` (the same on every member).
    pub fn indices(&mut self, t: u64) -> &[usize] {
        let m = self.m;
        let mut rng = rand_pcg::Pcg64::seed_from_u64(self.seed ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        draw(&mut rng, self.delta.len(), m, &mut self.taken, &mut self.picked);
        &self.picked
    }
}

impl Replicator for RandomReplicator {
    fn fold(&mut self, t: u64, lr: f32, g: &[f32]) -> Exchange {
        // 2.
        let beta = self.beta;
        self.delta.iter_mut().zip(g).for_each(|(d, &g)| *d = beta * *d + lr * g);
        // 4-5.
        let mut values = self.values.take().expect("one exchange at a time");
        self.indices(t);
        for (v, &i) in values.iter_mut().zip(&self.picked) {
            *v = self.delta[i];
            self.delta[i] -= self.wire.round(*v);
        }
        Exchange::Mean { group: self.group.clone(), values, wire: self.wire }
    }

    fn unfold(&mut self, done: Exchange, q: &mut [f32]) {
        let Exchange::Mean { values, .. } = done else { unreachable!("Random exchanges by all-reduce") };
        q.fill(0.0);
        for (v, &i) in values.iter().zip(&self.picked) {
            q[i] = *v;
        }
        self.values = Some(values);
    }

    fn flops(&self) -> f64 {
        3.0 * self.delta.len() as f64
    }

    fn budget(&self) -> Budget {
        Budget { payload_bytes: self.m * self.wire.bytes_per_elem(), every: 1, dense_bytes: 4 * self.delta.len() }
    }

    fn state(&self) -> Vec<(String, Vec<f32>)> {
        vec![("delta".into(), self.delta.clone())]
    }

    fn restore(&mut self, from: &crate::strategy::StrategyState) -> Result<()> {
        from.copy_into("delta", &mut self.delta)
    }
}
