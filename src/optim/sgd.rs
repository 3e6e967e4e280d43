//! SGD with optional momentum, dampening, Nesterov momentum and coupled
//! weight decay, with the semantics of PyTorch's `torch.optim.SGD`
//! (Nesterov momentum in the form of Sutskever et al., 2013).

use anyhow::ensure;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{check_len, load_named_state, DecaySegments, Optimizer, CHUNK};

/// SGD hyper-parameters (the learning rate comes from the schedule).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SgdConfig {
    /// Momentum factor mu, >= 0; 0 disables the momentum buffer.
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub momentum: f32,
    /// Use Nesterov momentum (needs momentum > 0 and dampening = 0).
    pub nesterov: bool,
    /// Dampening of the gradient added to the momentum buffer, in [0, 1].
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub dampening: f32,
    /// Coupled (L2) weight decay added to the gradient, >= 0; applies only to
    /// elements listed in the step's `DecaySegments`.
    #[serde(serialize_with = "crate::util::f32_shortest::serialize")]
    pub weight_decay: f32,
}

impl Default for SgdConfig {
    fn default() -> Self {
        Self { momentum: 0.0, nesterov: false, dampening: 0.0, weight_decay: 0.0 }
    }
}

impl SgdConfig {
    /// Checks the ranges documented on each field.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.momentum >= 0.0 && self.momentum.is_finite(), "sgd: momentum must be >= 0, got {}", self.momentum);
        ensure!((0.0..=1.0).contains(&self.dampening), "sgd: dampening must be in [0, 1], got {}", self.dampening);
        ensure!(
            self.weight_decay >= 0.0 && self.weight_decay.is_finite(),
            "sgd: weight_decay must be >= 0 and finite, got {}",
            self.weight_decay
        );
        ensure!(
            !self.nesterov || (self.momentum > 0.0 && self.dampening == 0.0),
            "sgd: nesterov requires momentum > 0 and dampening = 0 (got momentum {}, dampening {})",
            self.momentum,
            self.dampening
        );
        Ok(())
    }
}

/// SGD over a flat slice of `len` elements.
#[derive(Clone, Debug)]
pub struct Sgd {
    cfg: SgdConfig,
    len: usize,
    steps: u64,
    /// Momentum buffer; empty when momentum is 0.
    momentum_buffer: Vec<f32>,
}

/// Per-step constants shared by every element.
struct Coefs {
    lr: f32,
    mu: f32,
    one_minus_dampening: f32,
    nesterov: bool,
    /// No buffer yet: it is initialised to the gradient.
    first: bool,
}

impl Coefs {
    /// One element; `wd` is 0 for undecayed elements. Returns (p, buf).
    #[inline(always)]
    fn update(&self, p: f32, g: f32, buf: f32, wd: f32) -> (f32, f32) {
        // g' = g + wd * p  (coupled decay)
        let g = if wd != 0.0 { g + wd * p } else { g };
        if self.mu == 0.0 {
            // p <- p - lr * g'
            return (p - self.lr * g, buf);
        }
        // buf = g' on the first step, else mu * buf + (1 - dampening) * g'
        let buf = if self.first { g } else { self.mu * buf + self.one_minus_dampening * g };
        // d = g' + mu * buf (Nesterov) or buf; p <- p - lr * d
        let d = if self.nesterov { g + self.mu * buf } else { buf };
        (p - self.lr * d, buf)
    }
}

impl Sgd {
    /// Empty momentum buffer for `len` elements; the config should be validated.
    pub fn new(cfg: SgdConfig, len: usize) -> Self {
        let buf_len = if cfg.momentum != 0.0 { len } else { 0 };
        Self { cfg, len, steps: 0, momentum_buffer: vec![0.0; buf_len] }
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &SgdConfig {
        &self.cfg
    }

    fn coefs(&self, lr: f32) -> Coefs {
        Coefs {
            lr,
            mu: self.cfg.momentum,
            one_minus_dampening: 1.0 - self.cfg.dampening,
            nesterov: self.cfg.nesterov,
            first: self.steps == 0,
        }
    }

    fn wd_for(&self, decayed: bool) -> f32 {
        if decayed {
            self.cfg.weight_decay
        } else {
            0.0
        }
    }

    /// Whether the config keeps a momentum buffer (named in checkpoints even
    /// when `len` is 0).
    fn has_buf(&self) -> bool {
        self.cfg.momentum != 0.0
    }

    fn check(&self, params: usize, grads: usize) {
        check_len("sgd", "params", params, self.len);
        check_len("sgd", "grads", grads, self.len);
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32, decay: &DecaySegments) {
        self.check(params.len(), grads.len());
        let c = self.coefs(lr);
        let (wd_on, wd_off) = (self.wd_for(true), self.wd_for(false));
        let chunks = params.par_chunks_mut(CHUNK).zip(grads.par_chunks(CHUNK)).enumerate();
        if !self.has_buf() {
            chunks.for_each(|(k, (p, g))| {
                decay.for_each_span(k * CHUNK, p.len(), |span, dec| {
                    let wd = if dec { wd_on } else { wd_off };
                    for i in span {
                        p[i] = c.update(p[i], g[i], 0.0, wd).0;
                    }
                });
            });
        } else {
            chunks.zip(self.momentum_buffer.par_chunks_mut(CHUNK)).for_each(|((k, (p, g)), b)| {
                decay.for_each_span(k * CHUNK, p.len(), |span, dec| {
                    let wd = if dec { wd_on } else { wd_off };
                    for i in span {
                        (p[i], b[i]) = c.update(p[i], g[i], b[i], wd);
                    }
                });
            });
        }
        self.steps += 1;
    }

    fn look_ahead(&self, params: &[f32], grads: &[f32], lr: f32, decay: &DecaySegments, out: &mut [f32]) {
        self.check(params.len(), grads.len());
        check_len("sgd", "out", out.len(), self.len);
        let c = self.coefs(lr);
        let chunks = out.par_chunks_mut(CHUNK).zip(params.par_chunks(CHUNK)).zip(grads.par_chunks(CHUNK)).enumerate();
        let has_buf = self.has_buf();
        chunks.for_each(|(k, ((o, p), g))| {
            let off = k * CHUNK;
            let b = if has_buf { &self.momentum_buffer[off..off + o.len()] } else { &[][..] };
            decay.for_each_span(off, o.len(), |span, dec| {
                let wd = self.wd_for(dec);
                for i in span {
                    o[i] = c.update(p[i], g[i], if has_buf { b[i] } else { 0.0 }, wd).0;
                }
            });
        });
    }

    fn steps_taken(&self) -> u64 {
        self.steps
    }

    fn state_tensors(&self) -> Vec<(String, &[f32])> {
        if !self.has_buf() {
            Vec::new()
        } else {
            vec![("momentum_buffer".into(), &self.momentum_buffer[..])]
        }
    }

    fn load_state(&mut self, steps: u64, tensors: &[(String, Vec<f32>)]) -> anyhow::Result<()> {
        if !self.has_buf() {
            load_named_state("sgd", tensors, &mut [])?;
        } else {
            load_named_state("sgd", tensors, &mut [("momentum_buffer", &mut self.momentum_buffer[..])])?;
        }
        self.steps = steps;
        Ok(())
    }

    fn state_len(&self) -> usize {
        self.momentum_buffer.len()
    }
}

#[cfg(test)]
#[path = "sgd_tests.rs"]
mod tests;
