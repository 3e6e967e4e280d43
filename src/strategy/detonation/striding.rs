//! The Striding replicator (DeToNATION paper, "Replication Schemes"): every
//! `stride`-th element of the momentum, the offset moving by one each step
//! (so every element is sent within n steps); no index travels.
//!
//! ```text
//! 2. delta <- beta delta + lr g
//! 4. I <- { (t + j * stride) mod n : j < m },  stride = max(1, n / m)
//! 5. v <- delta[I];  delta[I] <- delta[I] - v
//! 6. v <- all-reduce mean of v over the replication group
//! 7. Q <- 0;  Q[I] <- v
//! ```

use super::{Budget, Exchange, Replicator};
use crate::comm::WireDtype;
use crate::runtime::Group;
use anyhow::Result;

/// The Striding replicator of one shard.
pub struct StridingReplicator {
    beta: f32,
    m: usize,
    group: Group,
    wire: WireDtype,
    delta: Vec<f32>,
    offset: usize,
    values: Option<Vec<f32>>,
}

impl StridingReplicator {
    /// `m` values per step of a shard of `len`, over `group`.
    pub fn new(beta: f32, m: usize, len: usize, group: Group, wire: WireDtype) -> Self {
        StridingReplicator { beta, m, group, wire, delta: vec![0.0; len], offset: 0, values: Some(vec![0.0; m]) }
    }

    /// The distance between sent elements.
    pub fn stride(&self) -> usize {
        (self.delta.len() / self.m).max(1)
    }

    /// Index `j` of step `t`'s selection.
    pub fn index(&self, t: u64, j: usize) -> usize {
        let n = self.delta.len();
        ((t % n as u64) as usize + j * self.stride()) % n
    }
}

impl Replicator for StridingReplicator {
    fn fold(&mut self, t: u64, lr: f32, g: &[f32]) -> Exchange {
        let beta = self.beta;
        self.delta.iter_mut().zip(g).for_each(|(d, &g)| *d = beta * *d + lr * g);
        let mut values = self.values.take().expect("one exchange at a time");
        self.offset = (t % self.delta.len() as u64) as usize;
        for (j, v) in values.iter_mut().enumerate() {
            let i = self.index(t, j);
            *v = self.delta[i];
            self.delta[i] -= self.wire.round(*v);
        }
        Exchange::Mean { group: self.group.clone(), values, wire: self.wire }
    }

    fn unfold(&mut self, done: Exchange, q: &mut [f32]) {
        let Exchange::Mean { values, .. } = done else { unreachable!("Striding exchanges by all-reduce") };
        q.fill(0.0);
        let n = self.delta.len();
        for (j, v) in values.iter().enumerate() {
            q[(self.offset + j * self.stride()) % n] = *v;
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
