//! What the Random and Striding replicators share (DeToNATION paper,
//! "Replication Schemes"): both send the momentum's values at indices that
//! every member of the replication group computes alike, so no index
//! travels and the bytes buy only values. They differ in one thing, the
//! rule that picks step t's indices: a [`Selection`] (random.rs,
//! striding.rs, striding_element.rs).
//!
//! ```text
//! 2. delta <- beta delta + lr g
//! 4. I <- selection(t)                                 identical on every member
//! 5. v <- delta[I];  delta[I] <- delta[I] - v          (v as the wire carries it)
//! 6. v <- all-reduce mean of v over the replication group
//! 7. Q <- 0;  Q[I] <- v
//! ```

use super::replicator::{Exchange, Replicator};
use crate::comm::WireDtype;
use crate::runtime::Group;
use crate::strategy::outcome::Budget;
use anyhow::Result;

/// The rule that picks a step's indices (step 4).
pub trait Selection: Send {
    /// Fills `out` with step `t`'s `m` indices of `0..n`, the same on every
    /// member (distinct, except striding's repeated rows).
    fn select(&mut self, t: u64, n: usize, m: usize, out: &mut Vec<usize>);
}

/// A replicator that sends `m` values per step at the indices `S` picks.
pub struct IndexedReplicator<S> {
    beta: f32,
    /// Values sent per step.
    m: usize,
    group: Group,
    wire: WireDtype,
    delta: Vec<f32>,
    /// This step's indices, in the order their values travel.
    picked: Vec<usize>,
    /// The exchange's buffer while no exchange is in flight.
    values: Option<Vec<f32>>,
    selection: S,
}

impl<S: Selection> IndexedReplicator<S> {
    /// `m` values per step of a shard of `len`, over `group`, at the indices `selection` picks.
    pub fn with_selection(selection: S, beta: f32, m: usize, len: usize, group: Group, wire: WireDtype) -> Self {
        IndexedReplicator {
            beta,
            m,
            group,
            wire,
            delta: vec![0.0; len],
            picked: Vec::with_capacity(m),
            values: Some(vec![0.0; m]),
            selection,
        }
    }

    /// The indices of step `t` (the same on every member).
    pub fn indices(&mut self, t: u64) -> &[usize] {
        self.selection.select(t, self.delta.len(), self.m, &mut self.picked);
        &self.picked
    }

    /// Elements of the shard.
    pub fn shard_len(&self) -> usize {
        self.delta.len()
    }

    /// Values sent per step.
    pub fn per_step(&self) -> usize {
        self.m
    }

    /// The rule that picks the indices.
    pub fn selection(&self) -> &S {
        &self.selection
    }
}

impl<S: Selection> Replicator for IndexedReplicator<S> {
    fn fold(&mut self, t: u64, lr: f32, g: &[f32]) -> Exchange {
        // 2.
        let beta = self.beta;
        self.delta.iter_mut().zip(g).for_each(|(d, &g)| *d = beta * *d + lr * g);
        // 4-5. Every value is read before any leaves delta, and what stays
        // is set, not subtracted: an index picked twice (striding's rows
        // can repeat) sends the same value twice and leaves once.
        let mut values = self.values.take().expect("one exchange at a time");
        self.indices(t);
        for (v, &i) in values.iter_mut().zip(&self.picked) {
            *v = self.delta[i];
        }
        for (v, &i) in values.iter().zip(&self.picked) {
            self.delta[i] = v - self.wire.round(*v);
        }
        Exchange::Mean { group: self.group.clone(), values, wire: self.wire }
    }

    fn unfold(&mut self, done: Exchange, q: &mut [f32]) {
        let Exchange::Mean { values, .. } = done else { unreachable!("indexed replicators exchange by all-reduce") };
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

    fn restore(&mut self, from: &crate::strategy::journal::StrategyState) -> Result<()> {
        from.copy_into("delta", &mut self.delta)
    }
}
