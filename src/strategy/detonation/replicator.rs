//! Steps 2-7 of a DeMo step behind one interface (mod.rs has the step
//! numbers): a `Replicator` folds a gradient into what to send (`fold`,
//! steps 2-5) and turns what came back into Q (`unfold`, step 7); the
//! `Exchange` between them is step 6, one batched task for all tensors.

use crate::comm::{ReduceOp, WireDtype};
use crate::runtime::{CommSide, CommTask, Group};
use crate::strategy::journal::StrategyState;
use crate::strategy::outcome::Budget;
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
    /// Random, striding, diloco, full and the others: the selected values, averaged (the
    /// indices are known to every member: nothing else travels).
    Mean {
        /// The replication group.
        group: Group,
        /// This member's values in; the mean out.
        values: Vec<f32>,
        /// How the values travel.
        wire: WireDtype,
    },
    /// Nothing this step (diloco and diloco-delta between exchanges).
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
    fn restore(&mut self, from: &StrategyState) -> Result<()>;
}

/// Values a replicator sends for compression rate `c` of a region of `n`
/// elements, values in `wire` (no indices travel): `floor(c * 4n / bytes)`,
/// at least 1, at most n.
pub fn values_for(c: f64, n: usize, wire: WireDtype) -> usize {
    ((c * 4.0 * n as f64 / wire.bytes_per_elem() as f64).floor() as usize).clamp(1, n.max(1))
}
