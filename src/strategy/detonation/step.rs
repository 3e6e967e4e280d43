//! The DeMo optimizer step on a shard, steps 1, 8 and 9 of
//! shared/notes/demo.md around the replicator's Q (steps 2-7):
//!
//! ```text
//! 1. p <- p * (1 - lr * wd)          decoupled weight decay, on the tensors that take decay
//! 8. Q <- sign(Q)                    ternary: sign(0) = 0 (optional: `sign = false`)
//! 9. p <- p - lr * Q                 DeMo-SGD: SGD without momentum
//!    or p <- AdamW(p, Q)             Decoupled AdamW (adamw.rs): moments from Q, kept locally
//! ```
//!
//! Weight decay is applied here, by this code, whatever the inner
//! optimizer. The DeToNATION code reads `self.weight_decay`, an attribute
//! its mixin never sets (`detonatiomixin.py:95-96`: it was renamed
//! `detonation_weight_decay`), so any non-zero decay raises there;
//! tests/mod.rs `weight_decay_is_really_applied` pins what step 1 does.
//!
//! Without sign the step is `lr * Q` with Q already weighted by lr (step 2
//! folds `lr * g` into delta), as the note and the reference define it:
//! the update scales with lr^2 (docs/decisions.md).

use super::adamw::DecoupledAdamW;
use crate::optim::DecaySegments;
use anyhow::Result;

/// The inner optimizer of step 9.
pub enum Inner {
    /// DeMo-SGD: p <- p - lr Q.
    Sgd,
    /// Decoupled AdamW (adamw.rs).
    AdamW(DecoupledAdamW),
}

/// Steps 1, 8 and 9 for one shard.
pub struct DemoStep {
    /// Decoupled weight decay factor (0: off).
    pub weight_decay: f32,
    /// Which elements of the shard take decay.
    pub decay: DecaySegments,
    /// Whether step 8 applies.
    pub sign: bool,
    /// Step 9.
    pub inner: Inner,
}

/// sign(x) with sign(0) = 0 (torch.sign; Rust's `signum` gives 1 for +0).
pub fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

impl DemoStep {
    /// Applies Q (consumed: step 8 works in place) to the shard `p` at learning rate `lr`.
    pub fn apply(&mut self, lr: f32, q: &mut [f32], p: &mut [f32]) {
        // 1. Decoupled weight decay.
        if self.weight_decay != 0.0 {
            let mul = 1.0 - lr * self.weight_decay;
            self.decay.for_each_span(0, p.len(), |span, decayed| {
                if decayed {
                    p[span].iter_mut().for_each(|x| *x *= mul);
                }
            });
        }
        // 8. Sign.
        if self.sign {
            q.iter_mut().for_each(|x| *x = sign(*x));
        }
        // 9. The inner step.
        match &mut self.inner {
            Inner::Sgd => p.iter_mut().zip(q.iter()).for_each(|(x, &d)| *x -= lr * d),
            Inner::AdamW(a) => a.step(p, q, lr),
        }
    }

    /// Inner optimizer steps taken.
    pub fn steps_taken(&self) -> u64 {
        match &self.inner {
            Inner::Sgd => 0,
            Inner::AdamW(a) => a.steps_taken(),
        }
    }

    /// The inner optimizer's state, for a checkpoint.
    pub fn state(&self) -> Vec<(String, Vec<f32>)> {
        match &self.inner {
            Inner::Sgd => Vec::new(),
            Inner::AdamW(a) => a.state(),
        }
    }

    /// f32 values of inner-optimizer state held.
    pub fn state_len(&self) -> usize {
        match &self.inner {
            Inner::Sgd => 0,
            Inner::AdamW(a) => a.state_len(),
        }
    }

    /// Restores [`DemoStep::state`] (`steps`: inner steps taken).
    pub fn restore(&mut self, steps: u64, tensors: &[(String, Vec<f32>)]) -> Result<()> {
        match &mut self.inner {
            Inner::Sgd => Ok(()),
            Inner::AdamW(a) => a.restore(steps, tensors),
        }
    }
}
