//! `diloco-delta`: shared/notes/demo.md's reading of the DeToNATION paper's
//! "synchronization each n'th optimization step" ("full every n"): nothing
//! travels for n-1 steps while the momentum accumulates, then the whole
//! momentum is averaged and leaves every member's delta. The parameters
//! move once per n steps: n times fewer updates than every other
//! replicator. This was lowcomm's `diloco` until issue 26; the DeToNATION
//! code's DiLoCo is diloco.rs (a local step every step).
//!
//! ```text
//! 2. delta <- beta delta + lr g
//!    if (t + 1) mod n == 0:  v <- delta;  delta <- delta - v;  Q <- all-reduce mean of v
//!    else:                   Q <- 0                     (step 9 then moves nothing)
//! ```
//!
//! Its bytes budget per step is 4N / n (f32): compression 1/n.

use super::replicator::{Exchange, Replicator};
use crate::comm::WireDtype;
use crate::runtime::Group;
use crate::strategy::outcome::Budget;
use anyhow::Result;

/// The `diloco-delta` replicator of one shard.
pub struct DilocoDeltaReplicator {
    beta: f32,
    every: u64,
    group: Group,
    wire: WireDtype,
    delta: Vec<f32>,
    values: Option<Vec<f32>>,
}

impl DilocoDeltaReplicator {
    /// Averages the momentum every `every` steps over `group`.
    pub fn new(beta: f32, every: u64, len: usize, group: Group, wire: WireDtype) -> Self {
        DilocoDeltaReplicator {
            beta,
            every: every.max(1),
            group,
            wire,
            delta: vec![0.0; len],
            values: Some(vec![0.0; len]),
        }
    }
}

impl Replicator for DilocoDeltaReplicator {
    fn fold(&mut self, t: u64, lr: f32, g: &[f32]) -> Exchange {
        let beta = self.beta;
        self.delta.iter_mut().zip(g).for_each(|(d, &g)| *d = beta * *d + lr * g);
        if !(t + 1).is_multiple_of(self.every) {
            return Exchange::Nothing;
        }
        let mut values = self.values.take().expect("one exchange at a time");
        for (v, d) in values.iter_mut().zip(self.delta.iter_mut()) {
            *v = *d;
            *d -= self.wire.round(*v);
        }
        Exchange::Mean { group: self.group.clone(), values, wire: self.wire }
    }

    fn unfold(&mut self, done: Exchange, q: &mut [f32]) {
        match done {
            Exchange::Mean { values, .. } => {
                q.copy_from_slice(&values);
                self.values = Some(values);
            }
            _ => q.fill(0.0),
        }
    }

    fn flops(&self) -> f64 {
        3.0 * self.delta.len() as f64
    }

    fn budget(&self) -> Budget {
        let n = self.delta.len();
        Budget { payload_bytes: n * self.wire.bytes_per_elem(), every: self.every, dense_bytes: 4 * n }
    }

    fn state(&self) -> Vec<(String, Vec<f32>)> {
        vec![("delta".into(), self.delta.clone())]
    }

    fn restore(&mut self, from: &crate::strategy::journal::StrategyState) -> Result<()> {
        from.copy_into("delta", &mut self.delta)
    }
}
