//! DeToNATION (shared/papers/detonation-flexdemo.txt): DeMo (decoupled
//! momentum, shared/notes/demo.md) and FlexDeMo (DeMo with hybrid sharding
//! inside nodes), with interchangeable replicators and inner optimizers.
//!
//! One DeMo step on a worker's shard, with the note's step numbers:
//!
//! ```text
//! 1.   p <- p * (1 - lr * wd)                          step.rs (decoupled weight decay)
//! 2-5. delta <- beta delta + lr g; pick what to send;  Replicator::fold  (one file per replicator: demo.rs,
//!      delta <- delta - what is sent                      random.rs, striding.rs, diloco.rs, full.rs,
//!                                                         striding_element.rs, diloco_delta.rs)
//! 6.   exchange, ONE batched task for all tensors       Exchange (replicator.rs)
//! 7.   Q <- decode (mean over contributors)             Replicator::unfold
//! 8.   Q <- sign(Q)                                     step.rs
//! 9.   p <- p - lr Q   (DeMo-SGD)  or AdamW(p, Q)       step.rs, adamw.rs (Decoupled AdamW)
//! ```
//!
//! `flexdemo.rs` runs it: plain DeMo exchanges over the world; FlexDeMo
//! first reduce-scatters gradients inside the node (each worker then owns a
//! row-aligned shard, shard.rs) and exchanges only with the workers holding
//! the same shard on other nodes (`Group::Replicas`).

pub mod adamw;
pub mod demo;
pub mod diloco;
pub mod diloco_delta;
pub mod flexdemo;
pub mod full;
pub mod indexed;
pub mod random;
pub mod replicator;
pub mod settings;
pub mod shard;
pub mod step;
pub mod striding;
pub mod striding_element;
#[cfg(test)]
mod tests;

pub use replicator::{values_for, Exchange, Replicator};

use super::outcome::Budget;
use crate::comm::WireDtype;
use crate::optim::dct::Piece;
use crate::runtime::Group;
use anyhow::Result;
use settings::{DemoSettings, ReplicatorKind};

/// The replicator `s` names for a shard of `len` elements cut into
/// `pieces`, exchanging over `group` of `members` workers.
pub fn build(
    s: &DemoSettings,
    pieces: &[Piece],
    len: usize,
    group: Group,
    members: usize,
    wire: WireDtype,
) -> Result<Box<dyn Replicator>> {
    if members <= 1 && !s.replicator.raw_gradient() {
        // A replication group of one has no one to agree with: everything
        // is "sent" (the reference does the same), Q = lr g.
        return Ok(Box::new(Alone { q: vec![0.0; len] }));
    }
    let c = s.compression.unwrap_or(DemoSettings::DEFAULT_COMPRESSION);
    Ok(match s.replicator {
        ReplicatorKind::Demo => Box::new(demo::DemoReplicator::new(s, pieces, len, group, members, wire)),
        ReplicatorKind::Random => {
            Box::new(random::RandomReplicator::new(s.beta, values_for(c, len, wire), s.seed, len, group, wire))
        }
        ReplicatorKind::Striding => {
            Box::new(striding::StridingReplicator::new(s.beta, c, s.chunk, pieces, len, group, wire))
        }
        ReplicatorKind::StridingElement => Box::new(striding_element::StridingElementReplicator::new(
            s.beta,
            values_for(c, len, wire),
            len,
            group,
            wire,
        )),
        ReplicatorKind::Diloco => Box::new(diloco::DilocoReplicator::new(s.diloco_every(), len, group, wire, members)),
        ReplicatorKind::DilocoDelta => {
            Box::new(diloco_delta::DilocoDeltaReplicator::new(s.beta, s.diloco_every(), len, group, wire))
        }
        ReplicatorKind::Full => Box::new(full::FullReplicator::new(len, group, wire, members)),
    })
}

/// A replication group of one: nothing to agree on, so everything is
/// "sent" (the reference does the same): delta = beta * 0 + lr g, Q = delta.
struct Alone {
    q: Vec<f32>,
}

impl Replicator for Alone {
    fn fold(&mut self, _t: u64, lr: f32, g: &[f32]) -> Exchange {
        self.q.iter_mut().zip(g).for_each(|(q, &g)| *q = lr * g);
        Exchange::Nothing
    }
    fn unfold(&mut self, _done: Exchange, q: &mut [f32]) {
        q.copy_from_slice(&self.q);
    }
    fn flops(&self) -> f64 {
        self.q.len() as f64
    }
    fn budget(&self) -> Budget {
        Budget { payload_bytes: 0, every: 1, dense_bytes: 4 * self.q.len() }
    }
    fn state(&self) -> Vec<(String, Vec<f32>)> {
        Vec::new()
    }
    fn restore(&mut self, _from: &crate::strategy::journal::StrategyState) -> Result<()> {
        Ok(())
    }
}
