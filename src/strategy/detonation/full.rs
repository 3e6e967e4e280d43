//! The full replicator: no compression, no momentum; the replication group
//! averages the gradient shard every step. With Decoupled AdamW and no sign
//! this is hybrid-sharded AdamW, the paper's baseline (Hybrid-FSDP with
//! AdamW): reduce-scatter in the node, all-reduce across nodes, AdamW on
//! the shard, all-gather in the node.
//!
//! ```text
//! 6. Q <- all-reduce mean of g over the replication group
//! ```

use super::replicator::{Exchange, Replicator};
use crate::comm::WireDtype;
use crate::runtime::Group;
use crate::strategy::outcome::Budget;
use anyhow::Result;

/// The full replicator of one shard.
pub struct FullReplicator {
    group: Group,
    wire: WireDtype,
    members: usize,
    values: Option<Vec<f32>>,
}

impl FullReplicator {
    /// Averages a shard of `len` over `group` of `members`.
    pub fn new(len: usize, group: Group, wire: WireDtype, members: usize) -> Self {
        FullReplicator { group, wire, members, values: Some(vec![0.0; len]) }
    }
}

impl Replicator for FullReplicator {
    fn fold(&mut self, _t: u64, _lr: f32, g: &[f32]) -> Exchange {
        let mut values = self.values.take().expect("one exchange at a time");
        values.copy_from_slice(g);
        if self.members <= 1 {
            // Nobody to average with: Q = g.
            return Exchange::Mean { group: self.group.clone(), values, wire: WireDtype::F32 };
        }
        Exchange::Mean { group: self.group.clone(), values, wire: self.wire }
    }

    fn unfold(&mut self, done: Exchange, q: &mut [f32]) {
        let Exchange::Mean { values, .. } = done else { unreachable!("full exchanges by all-reduce") };
        q.copy_from_slice(&values);
        self.values = Some(values);
    }

    fn flops(&self) -> f64 {
        0.0
    }

    fn budget(&self) -> Budget {
        let n = self.values.as_ref().map_or(0, Vec::len);
        let bytes = if self.members <= 1 { 0 } else { n * self.wire.bytes_per_elem() };
        Budget { payload_bytes: bytes, every: 1, dense_bytes: 4 * n }
    }

    fn state(&self) -> Vec<(String, Vec<f32>)> {
        Vec::new()
    }

    fn restore(&mut self, _from: &crate::strategy::journal::StrategyState) -> Result<()> {
        Ok(())
    }
}
