//! The DiLoCo replicator as the DeToNATION code runs it (the paper: "DiLoCo
//! denotes synchronization each n'th optimization step"; its App. B calls
//! it "full sync (DiLoCo)"). The repository has no DiLoCo class: the
//! benchmarks run `FullReplicator` with `replicate_every = n`
//! (schneiderkamplab/DeToNATION be29e5c, `benchmarks/t5/train.py:34,171,179`),
//! and the mixin hands the node-mean gradient straight to the step on the
//! other steps (`detonation/detonatiomixin.py:99-111`):
//!
//! ```text
//! t = 0, 1, ... (the reference's step counter is t + 1):
//!     if (t + 1) mod n == 0:  Q <- all-reduce mean of g over the replication group   (full.rs)
//!     else:                   Q <- g                      the node's own mean gradient
//! then steps 8-9 as for every replicator: p <- p - lr sign(Q)  (or Decoupled AdamW)
//! ```
//!
//! No momentum (nothing is kept between steps), no parameter averaging:
//! the nodes take a local step every step and share only every n-th
//! step's gradient, so their parameters drift apart and are never pulled
//! back together. Bytes: the f32 (or wire) shard every n steps, 1/n. The
//! momentum variant that moves the parameters once per n steps is
//! `diloco-delta` (diloco_delta.rs).

use super::full::FullReplicator;
use super::replicator::{Exchange, Replicator};
use crate::comm::WireDtype;
use crate::runtime::Group;
use crate::strategy::outcome::Budget;
use anyhow::Result;

/// The DiLoCo replicator of one shard.
pub struct DilocoReplicator {
    every: u64,
    /// The exchange of every n-th step.
    full: FullReplicator,
    /// The gradient of a step without exchange, until `unfold` hands it out.
    local: Vec<f32>,
}

impl DilocoReplicator {
    /// Averages the gradient over `group` of `members` every `every` steps.
    pub fn new(every: u64, len: usize, group: Group, wire: WireDtype, members: usize) -> Self {
        DilocoReplicator {
            every: every.max(1),
            full: FullReplicator::new(len, group, wire, members),
            local: vec![0.0; len],
        }
    }

    /// Whether step `t` (from 0) exchanges: the reference's `t + 1` is a multiple of n.
    pub fn exchanges(&self, t: u64) -> bool {
        (t + 1).is_multiple_of(self.every)
    }
}

impl Replicator for DilocoReplicator {
    fn fold(&mut self, t: u64, lr: f32, g: &[f32]) -> Exchange {
        if self.exchanges(t) {
            return self.full.fold(t, lr, g);
        }
        self.local.copy_from_slice(g);
        Exchange::Nothing
    }

    fn unfold(&mut self, done: Exchange, q: &mut [f32]) {
        match done {
            Exchange::Nothing => q.copy_from_slice(&self.local),
            done => self.full.unfold(done, q),
        }
    }

    fn flops(&self) -> f64 {
        0.0
    }

    fn budget(&self) -> Budget {
        Budget { every: self.every, ..self.full.budget() }
    }

    fn state(&self) -> Vec<(String, Vec<f32>)> {
        Vec::new()
    }

    fn restore(&mut self, _from: &crate::strategy::journal::StrategyState) -> Result<()> {
        Ok(())
    }
}
