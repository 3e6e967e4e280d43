//! AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled
//! Weight Decay Regularization", Algorithm 2), with PyTorch's `AdamW`
//! ordering: the decay multiplies the parameter before the Adam update.

use anyhow::ensure;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{check_len, load_named_state, DecaySegments, Optimizer, CHUNK};

/// AdamW hyper-parameters (the learning rate comes from the schedule).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdamWConfig {
    /// Decay rate of the first-moment (mean) estimate, in [0, 1).
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub beta1: f32,
    /// Decay rate of the second-moment (uncentred variance) estimate, in [0, 1).
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub beta2: f32,
    /// Added to the root of the second moment to avoid division by zero; > 0.
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub eps: f32,
    /// Decoupled weight decay factor (multiplied by the learning rate), >= 0;
    /// applies only to elements listed in the step's `DecaySegments`.
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 }
    }
}

impl AdamWConfig {
    /// Checks the ranges documented on each field.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!((0.0..1.0).contains(&self.beta1), "adamw: beta1 must be in [0, 1), got {}", self.beta1);
        ensure!((0.0..1.0).contains(&self.beta2), "adamw: beta2 must be in [0, 1), got {}", self.beta2);
        ensure!(self.eps > 0.0 && self.eps.is_finite(), "adamw: eps must be > 0 and finite, got {}", self.eps);
        ensure!(
            self.weight_decay >= 0.0 && self.weight_decay.is_finite(),
            "adamw: weight_decay must be >= 0 and finite, got {}",
            self.weight_decay
        );
        Ok(())
    }
}

/// AdamW over a flat slice of `len` elements.
#[derive(Clone, Debug)]
pub struct AdamW {
    cfg: AdamWConfig,
    steps: u64,
    /// First moment m.
    exp_avg: Vec<f32>,
    /// Second moment v.
    exp_avg_sq: Vec<f32>,
}

/// Per-step constants shared by every element (public for the libtorch
/// backend's copy of the same update, `model/torch/resident.rs`).
#[derive(Clone, Copy, Debug)]
pub struct Coefs {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// 1 - beta1^t
    pub bc1: f32,
    /// 1 - beta2^t
    pub bc2: f32,
    /// 1 - lr * weight_decay (for decayed elements; 1 otherwise)
    pub decay_mul: f32,
}

impl Coefs {
    fn new(cfg: &AdamWConfig, lr: f32, t: u64) -> Self {
        // Bias corrections in f64 (as PyTorch does in Python floats), then f32.
        let t = i32::try_from(t).unwrap_or(i32::MAX);
        Self {
            lr,
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.eps,
            bc1: (1.0 - f64::from(cfg.beta1).powi(t)) as f32,
            bc2: (1.0 - f64::from(cfg.beta2).powi(t)) as f32,
            decay_mul: 1.0 - lr * cfg.weight_decay,
        }
    }

    /// One element of Algorithm 2; returns the new (p, m, v).
    #[inline(always)]
    fn update(&self, p: f32, g: f32, m: f32, v: f32, decay_mul: f32) -> (f32, f32, f32) {
        // Decoupled decay: p <- p * (1 - lr * wd)  (Alg. 2, line 12, eta_t * lambda)
        let p = p * decay_mul;
        // m_t = beta1 m_{t-1} + (1 - beta1) g_t  (line 7)
        let m = self.beta1 * m + (1.0 - self.beta1) * g;
        // v_t = beta2 v_{t-1} + (1 - beta2) g_t^2  (line 8)
        let v = self.beta2 * v + (1.0 - self.beta2) * g * g;
        // m_hat = m_t / (1 - beta1^t), v_hat = v_t / (1 - beta2^t)  (lines 9-10)
        let m_hat = m / self.bc1;
        let v_hat = v / self.bc2;
        // p <- p - lr * m_hat / (sqrt(v_hat) + eps)  (line 12)
        (p - self.lr * m_hat / (v_hat.sqrt() + self.eps), m, v)
    }

    fn mul_for(&self, decayed: bool) -> f32 {
        if decayed {
            self.decay_mul
        } else {
            1.0
        }
    }
}

impl AdamW {
    /// Zero moments for `len` elements; the config should be validated.
    pub fn new(cfg: AdamWConfig, len: usize) -> Self {
        Self { cfg, steps: 0, exp_avg: vec![0.0; len], exp_avg_sq: vec![0.0; len] }
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdamWConfig {
        &self.cfg
    }

    /// Counts a step taken elsewhere (on a libtorch device, whose copy of
    /// the moments comes back through [`AdamW::moments_mut`]) and returns
    /// its constants: those [`Optimizer::step`] would have used.
    pub fn count_step(&mut self, lr: f32) -> Coefs {
        self.steps += 1;
        Coefs::new(&self.cfg, lr, self.steps)
    }

    /// The first and second moments, writable (a device's copy of them
    /// goes up before its steps and comes back after).
    pub fn moments_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.exp_avg, &mut self.exp_avg_sq)
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32, decay: &DecaySegments) {
        let n = self.exp_avg.len();
        check_len("adamw", "params", params.len(), n);
        check_len("adamw", "grads", grads.len(), n);
        let c = Coefs::new(&self.cfg, lr, self.steps + 1);
        params
            .par_chunks_mut(CHUNK)
            .zip(grads.par_chunks(CHUNK))
            .zip(self.exp_avg.par_chunks_mut(CHUNK))
            .zip(self.exp_avg_sq.par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(k, (((p, g), m), v))| {
                decay.for_each_span(k * CHUNK, p.len(), |span, decayed| {
                    let mul = c.mul_for(decayed);
                    for i in span {
                        (p[i], m[i], v[i]) = c.update(p[i], g[i], m[i], v[i], mul);
                    }
                });
            });
        self.steps += 1;
    }

    fn look_ahead(&self, params: &[f32], grads: &[f32], lr: f32, decay: &DecaySegments, out: &mut [f32]) {
        let n = self.exp_avg.len();
        check_len("adamw", "params", params.len(), n);
        check_len("adamw", "grads", grads.len(), n);
        check_len("adamw", "out", out.len(), n);
        let c = Coefs::new(&self.cfg, lr, self.steps + 1);
        out.par_chunks_mut(CHUNK)
            .zip(params.par_chunks(CHUNK))
            .zip(grads.par_chunks(CHUNK))
            .zip(self.exp_avg.par_chunks(CHUNK))
            .zip(self.exp_avg_sq.par_chunks(CHUNK))
            .enumerate()
            .for_each(|(k, ((((o, p), g), m), v))| {
                decay.for_each_span(k * CHUNK, o.len(), |span, decayed| {
                    let mul = c.mul_for(decayed);
                    for i in span {
                        o[i] = c.update(p[i], g[i], m[i], v[i], mul).0;
                    }
                });
            });
    }

    fn steps_taken(&self) -> u64 {
        self.steps
    }

    fn state_tensors(&self) -> Vec<(String, &[f32])> {
        vec![("exp_avg".into(), &self.exp_avg[..]), ("exp_avg_sq".into(), &self.exp_avg_sq[..])]
    }

    fn load_state(&mut self, steps: u64, tensors: &[(String, Vec<f32>)]) -> anyhow::Result<()> {
        load_named_state(
            "adamw",
            tensors,
            &mut [("exp_avg", &mut self.exp_avg[..]), ("exp_avg_sq", &mut self.exp_avg_sq[..])],
        )?;
        self.steps = steps;
        Ok(())
    }

    fn state_len(&self) -> usize {
        self.exp_avg.len() + self.exp_avg_sq.len()
    }

    fn as_adamw_mut(&mut self) -> Option<&mut AdamW> {
        Some(self)
    }
}

#[cfg(test)]
#[path = "adamw_tests.rs"]
mod tests;
