//! Decoupled AdamW (DeToNATION paper, "Decoupled AdamW"): AdamW as the
//! inner optimizer of step 9, fed the replicated direction Q instead of a
//! gradient. Its moments are computed on each worker and never exchanged
//! (sharing them would cost 2-3x the traffic); only Q travels, through the
//! chosen replicator.
//!
//! ```text
//! m <- beta1 m + (1 - beta1) Q
//! v <- beta2 v + (1 - beta2) Q^2
//! p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
//! ```
//!
//! Weight decay is not here: step 1 (step.rs) applies it before, which is
//! exactly where AdamW applies its own (PyTorch's order), so with the
//! `full` replicator and no sign this is AdamW on the mean gradient.

use crate::optim::{AdamW, AdamWConfig, DecaySegments, Optimizer, OptimizerConfig};
use anyhow::{Context, Result};

/// AdamW on Q over a shard, decay left to step 1.
pub struct DecoupledAdamW {
    opt: AdamW,
}

impl DecoupledAdamW {
    /// For a shard of `len` elements, with the betas and eps of the run's
    /// `[optimizer]` when it is AdamW (else AdamW's defaults).
    pub fn new(run: &OptimizerConfig, len: usize) -> Self {
        let base = match run {
            OptimizerConfig::AdamW(c) => c.clone(),
            OptimizerConfig::Sgd(_) => AdamWConfig::default(),
        };
        DecoupledAdamW { opt: AdamW::new(AdamWConfig { weight_decay: 0.0, ..base }, len) }
    }

    /// One step with Q as the gradient.
    pub fn step(&mut self, p: &mut [f32], q: &[f32], lr: f32) {
        self.opt.step(p, q, lr, &DecaySegments::none());
    }

    /// Steps taken.
    pub fn steps_taken(&self) -> u64 {
        self.opt.steps_taken()
    }

    /// m and v, for a checkpoint.
    pub fn state(&self) -> Vec<(String, Vec<f32>)> {
        self.opt.state_tensors().into_iter().map(|(n, t)| (format!("adamw.{n}"), t.to_vec())).collect()
    }

    /// f32 values held.
    pub fn state_len(&self) -> usize {
        self.opt.state_len()
    }

    /// Restores [`DecoupledAdamW::state`].
    pub fn restore(&mut self, steps: u64, tensors: &[(String, Vec<f32>)]) -> Result<()> {
        let mine: Vec<(String, Vec<f32>)> =
            tensors.iter().filter_map(|(n, t)| n.strip_prefix("adamw.").map(|s| (s.to_string(), t.clone()))).collect();
        self.opt.load_state(steps, &mine).context("checkpointed Decoupled AdamW state does not fit")
    }
}
