//! `striding-element`: the DeToNATION paper's words for Striding ("every
//! n-th index") read element by element: every `stride`-th element of the
//! momentum, the offset moving by one each step (so every element is sent
//! within n steps); no index travels. lowcomm's `striding` until issue 26;
//! the DeToNATION code strides rows of each tensor (striding.rs). Steps 2
//! and 5-7 are [`IndexedReplicator`]'s; this file is step 4:
//!
//! ```text
//! 4. I <- { (t + j * stride) mod n : j < m },  stride = max(1, n / m)
//! ```

use super::indexed::{IndexedReplicator, Selection};
use crate::comm::WireDtype;
use crate::runtime::Group;

/// Step 4 of `striding-element`: an arithmetic progression whose offset is the step.
pub struct StridingElementSelection;

/// The `striding-element` replicator of one shard.
pub type StridingElementReplicator = IndexedReplicator<StridingElementSelection>;

/// The distance between sent elements of a shard of `n` sending `m` per step.
fn stride(n: usize, m: usize) -> usize {
    (n / m).max(1)
}

/// Index `j` of step `t`'s selection.
fn index(t: u64, j: usize, n: usize, m: usize) -> usize {
    ((t % n as u64) as usize + j * stride(n, m)) % n
}

impl Selection for StridingElementSelection {
    fn select(&mut self, t: u64, n: usize, m: usize, out: &mut Vec<usize>) {
        out.clear();
        out.extend((0..m).map(|j| index(t, j, n, m)));
    }
}

impl StridingElementReplicator {
    /// `m` values per step of a shard of `len`, over `group`.
    pub fn new(beta: f32, m: usize, len: usize, group: Group, wire: WireDtype) -> Self {
        IndexedReplicator::with_selection(StridingElementSelection, beta, m, len, group, wire)
    }

    /// The distance between sent elements.
    pub fn stride(&self) -> usize {
        stride(self.shard_len(), self.per_step())
    }

    /// Index `j` of step `t`'s selection.
    pub fn index(&self, t: u64, j: usize) -> usize {
        index(t, j, self.shard_len(), self.per_step())
    }
}
