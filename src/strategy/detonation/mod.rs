//! DeToNATION (shared/papers/detonation-flexdemo.txt): DeMo (decoupled
//! momentum, shared/notes/demo.md) and FlexDeMo (DeMo with hybrid sharding
//! inside nodes), with interchangeable replicators and inner optimizers.
//!
//! One DeMo step on a worker's shard, with the note's step numbers:
//!
//! ```text
//! 1.   p <- p * (1 - lr * wd)                          step.rs (decoupled weight decay)
//! 2-5. delta <- beta delta + lr g; pick what to send;  Replicator::fold  (one file per replicator:
//!      delta <- delta - what is sent                      demo.rs, random.rs, striding.rs, diloco.rs, full.rs)
//! 6.   exchange, ONE batched task for all tensors       Exchange (this file)
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
pub mod flexdemo;
pub mod full;
pub mod indexed;
pub mod random;
pub mod shard;
pub mod step;
pub mod striding;
#[cfg(test)]
mod tests;

use super::method::{DemoSettings, ReplicatorKind};
use crate::comm::{ReduceOp, WireDtype};
use crate::optim::dct::Piece;
use crate::runtime::{CommSide, CommTask, Group};
use anyhow::Result;

/// Step 6: what one step exchanges, all tensors of the shard in one
/// collective of a size fixed in advance (every member sends as much).
#[derive(Debug)]
pub enum Exchange {
    /// DeMo: every member's packed (index, value) pairs, all-gathered.
    Gather {
        /// The replication group.
        group: Group,
        /// This member's payload.
        input: Vec<u8>,
        /// Every member's payload, in member order.
        output: Vec<u8>,
    },
    /// Random, striding, diloco, full: the selected values, averaged (the
    /// indices are known to every member: nothing else travels).
    Mean {
        /// The replication group.
        group: Group,
        /// This member's values in; the mean out.
        values: Vec<f32>,
        /// How the values travel.
        wire: WireDtype,
    },
    /// Nothing this step (diloco between synchronisations).
    Nothing,
}

impl Exchange {
    /// Bytes this member puts into the exchange.
    pub fn payload_bytes(&self) -> usize {
        match self {
            Exchange::Gather { input, .. } => input.len(),
            Exchange::Mean { values, wire, .. } => values.len() * wire.bytes_per_elem(),
            Exchange::Nothing => 0,
        }
    }
}

impl CommTask for Exchange {
    type Output = Exchange;
    async fn run<C: CommSide>(mut self, c: &mut C) -> Exchange {
        match &mut self {
            Exchange::Gather { group, input, output } => c.all_gather_bytes(group, input, output).await,
            Exchange::Mean { group, values, wire } => c.all_reduce(group, values, ReduceOp::Mean, *wire).await,
            Exchange::Nothing => {}
        }
        self
    }
}

/// The slots of steps 2-7 that every replicator fills (the DeToNATION
/// framework's "replication scheme").
pub trait Replicator: Send {
    /// Steps 2-5 at step `t`: fold `lr * g` into the local momentum, select
    /// what to send, take it out of the momentum; the exchange to run.
    fn fold(&mut self, t: u64, lr: f32, g: &[f32]) -> Exchange;
    /// Step 7: `q` (the shard's length) from the completed exchange.
    fn unfold(&mut self, done: Exchange, q: &mut [f32]);
    /// Floating-point work of one fold + unfold (what the simulator costs).
    fn flops(&self) -> f64;
    /// Bytes one member puts into an exchange, and every how many steps.
    fn budget(&self) -> Budget;
    /// The momentum and anything else a checkpoint must keep.
    fn state(&self) -> Vec<(String, Vec<f32>)>;
    /// Restores [`Replicator::state`].
    fn restore(&mut self, from: &super::StrategyState) -> Result<()>;
}

/// What a replicator sends, for the report and the compression rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Budget {
    /// Bytes one member puts into one exchange.
    pub payload_bytes: usize,
    /// Exchanges happen every this many steps (diloco), else 1.
    pub every: u64,
    /// Bytes of the same region as a full f32 gradient (4 per element).
    pub dense_bytes: usize,
}

impl Budget {
    /// Bytes sent per step over bytes of a full f32 gradient of the region.
    pub fn compression(&self) -> f64 {
        self.payload_bytes as f64 / (self.every.max(1) as f64 * self.dense_bytes.max(1) as f64)
    }
}

/// Values a replicator sends for compression rate `c` of a region of `n`
/// elements, values in `wire` (no indices travel): `floor(c * 4n / bytes)`,
/// at least 1, at most n.
pub fn values_for(c: f64, n: usize, wire: WireDtype) -> usize {
    ((c * 4.0 * n as f64 / wire.bytes_per_elem() as f64).floor() as usize).clamp(1, n.max(1))
}

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
    if members <= 1 && s.replicator != ReplicatorKind::Full {
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
            Box::new(striding::StridingReplicator::new(s.beta, values_for(c, len, wire), len, group, wire))
        }
        ReplicatorKind::Diloco => Box::new(diloco::DilocoReplicator::new(s.beta, s.diloco_every(), len, group, wire)),
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
    fn restore(&mut self, _from: &super::StrategyState) -> Result<()> {
        Ok(())
    }
}
