//! The Random replicator (DeToNATION paper, "Replication Schemes"): every
//! member draws the same index set from an RNG seeded by (seed, step), so
//! no index travels and the bytes buy twice the values of DeMo's pairs.
//! Steps 2 and 5-7 are [`IndexedReplicator`]'s; this file is step 4:
//!
//! ```text
//! 4. I <- m distinct indices drawn by RNG(seed, t)     identical on every member, ascending
//! ```

use super::indexed::{IndexedReplicator, Selection};
use crate::comm::WireDtype;
use crate::runtime::Group;
use rand::{Rng, SeedableRng};

/// Step 4 of Random: a seeded draw.
pub struct RandomSelection {
    seed: u64,
    /// Marks during the draw (one per element of the shard).
    taken: Vec<bool>,
}

/// The Random replicator of one shard.
pub type RandomReplicator = IndexedReplicator<RandomSelection>;

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

impl Selection for RandomSelection {
    fn select(&mut self, t: u64, n: usize, m: usize, out: &mut Vec<usize>) {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(self.seed ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        draw(&mut rng, n, m, &mut self.taken, out);
    }
}

impl RandomReplicator {
    /// `m` values per step of a shard of `len`, over `group`, drawn with `seed`.
    pub fn new(beta: f32, m: usize, seed: u64, len: usize, group: Group, wire: WireDtype) -> Self {
        let selection = RandomSelection { seed, taken: vec![false; len] };
        IndexedReplicator::with_selection(selection, beta, m, len, group, wire)
    }
}
