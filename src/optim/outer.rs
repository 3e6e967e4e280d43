//! Outer optimizers of DiLoCo-style methods: one step on a pseudo-gradient
//! `g = theta_old - theta_worker` (async-local-sgd.txt, Algorithm 1 line 13),
//! not on a gradient. The step size `eps` is the outer learning rate.
//!
//! ```text
//! sgd           theta <- theta - eps g
//! sgd-momentum  m <- beta m + g;  theta <- theta - eps m
//! nesterov      m <- beta m + g;  theta <- theta - eps (beta m + g)        eq. 4: = eps (beta^2 m_old + (1 + beta) g)
//! dn            Algorithm 3 (Delayed Nesterov), buffer N, activation c in [0, 1/N]:
//!               Delta <- Delta + g
//!               if (t + 1) % N == 0:  m <- beta m + Delta / N;  theta <- theta - eps ((1 - cN + c) beta m + g / N);  Delta <- 0
//!               else:                 (m kept)              theta <- theta - eps (c beta m + g / N)
//!               t <- t + 1
//! ```
//!
//! Defaults are DiLoCo's, the setting the paper builds on: outer lr 0.7
//! (async-local-sgd.txt, App. 10.1, Table 5, "Outer learning rate ... 0.1,
//! 0.7" in bold: 0.7 for Nesterov) and momentum 0.9 (the paper does not
//! print beta; 0.9 is DiLoCo's, Douillard et al. 2023, Sec. 3: our choice
//! to follow it). DN's `c` defaults to 0 (Algorithm 3, "default to c = 0";
//! Sec. 6, Table 4 found c = 0.1 no better).

use anyhow::{bail, ensure, Result};
use serde::{Deserialize, Serialize};

/// Which outer optimizer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OuterKind {
    /// Plain SGD on the pseudo-gradient (lr 1: parameter averaging).
    Sgd,
    /// Heavy-ball momentum.
    SgdMomentum,
    /// Nesterov momentum, eq. 4 (DiLoCo's outer optimizer).
    #[default]
    Nesterov,
    /// Delayed Nesterov, Algorithm 3.
    Dn,
}

impl OuterKind {
    /// Names, as in `outer = "..."`.
    pub const NAMES: [&'static str; 4] = ["sgd", "sgd-momentum", "nesterov", "dn"];

    /// The name, as in `outer = "..."`.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Copies of the parameters this optimizer keeps as state: none for
    /// sgd, the momentum m, and for dn also its buffer Delta.
    pub fn state_copies(self) -> usize {
        match self {
            OuterKind::Sgd => 0,
            OuterKind::SgdMomentum | OuterKind::Nesterov => 1,
            OuterKind::Dn => 2,
        }
    }
}

/// An outer optimizer's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OuterConfig {
    /// Which optimizer.
    pub kind: OuterKind,
    /// Outer learning rate eps, > 0.
    pub lr: f32,
    /// Momentum decay beta, in [0, 1) (unused by sgd).
    pub momentum: f32,
    /// DN's buffer size N >= 1 (dn only).
    pub dn_buffer: u64,
    /// DN's momentum activation c in [0, 1/N] (dn only).
    pub dn_c: f32,
}

impl Default for OuterConfig {
    fn default() -> Self {
        OuterConfig { kind: OuterKind::Nesterov, lr: 0.7, momentum: 0.9, dn_buffer: 4, dn_c: 0.0 }
    }
}

impl OuterConfig {
    /// Checks the ranges; errors name the key of `[methods.{method}]` and a valid example.
    pub fn validate(&self, method: &str) -> Result<()> {
        let s = format!("[methods.{method}]");
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            bail!("{s}: outer_lr must be > 0, got {}; e.g. outer_lr = 0.7 (flag --outer-lr 0.7)", self.lr);
        }
        if !(0.0..1.0).contains(&self.momentum) {
            bail!(
                "{s}: outer_momentum must be in [0, 1), got {}; e.g. outer_momentum = 0.9 (flag --outer-momentum 0.9)",
                self.momentum
            );
        }
        if self.dn_buffer == 0 {
            bail!("{s}: dn_buffer must be at least 1 (Delayed Nesterov's N), e.g. dn_buffer = 4 (flag --dn-buffer 4)");
        }
        let max = 1.0 / self.dn_buffer as f32;
        if !(self.dn_c >= 0.0 && self.dn_c <= max) {
            bail!(
                "{s}: dn_c must be in [0, 1/N] = [0, {max}] with dn_buffer N = {}, got {}; e.g. dn_c = 0 (flag --dn-c 0)",
                self.dn_buffer,
                self.dn_c
            );
        }
        Ok(())
    }
}

/// An outer optimizer with its state over `n` parameters. Cloned by
/// streaming DiLoCo's eager updates for a stand-in step that leaves the
/// true state untouched.
#[derive(Clone)]
pub struct OuterOpt {
    cfg: OuterConfig,
    /// Momentum m (empty for sgd).
    m: Vec<f32>,
    /// DN's buffer Delta (empty unless dn).
    delta: Vec<f32>,
    /// Outer steps taken (Algorithm 3's t).
    t: u64,
}

impl OuterOpt {
    /// Fresh state (m_0 = 0, Delta = 0, t = 0) for `n` parameters.
    pub fn new(cfg: OuterConfig, n: usize) -> OuterOpt {
        let m = if cfg.kind.state_copies() >= 1 { n } else { 0 };
        let d = if cfg.kind.state_copies() == 2 { n } else { 0 };
        OuterOpt { cfg, m: vec![0.0; m], delta: vec![0.0; d], t: 0 }
    }

    /// One outer step on `theta` with the pseudo-gradient `g`.
    pub fn step(&mut self, theta: &mut [f32], g: &[f32]) {
        assert_eq!(theta.len(), g.len(), "outer step: parameters and pseudo-gradient differ in length");
        let (eps, beta) = (self.cfg.lr, self.cfg.momentum);
        match self.cfg.kind {
            OuterKind::Sgd => theta.iter_mut().zip(g).for_each(|(x, g)| *x -= eps * g),
            OuterKind::SgdMomentum => {
                for ((x, m), g) in theta.iter_mut().zip(&mut self.m).zip(g) {
                    *m = beta * *m + g;
                    *x -= eps * *m;
                }
            }
            // Eq. 4 in PyTorch's form: beta m_{t+1} + g = beta^2 m_t + (1 + beta) g.
            OuterKind::Nesterov => {
                for ((x, m), g) in theta.iter_mut().zip(&mut self.m).zip(g) {
                    *m = beta * *m + g;
                    *x -= eps * (beta * *m + g);
                }
            }
            OuterKind::Dn => {
                let n = self.cfg.dn_buffer as f32;
                let c = self.cfg.dn_c;
                let it = theta.iter_mut().zip(&mut self.m).zip(&mut self.delta).zip(g);
                if (self.t + 1).is_multiple_of(self.cfg.dn_buffer) {
                    // The momentum update every N-th step, on the buffered mean.
                    let k = (1.0 - c * n + c) * beta;
                    for (((x, m), d), g) in it {
                        *d += g;
                        *m = beta * *m + *d / n;
                        *x -= eps * (k * *m + g / n);
                        *d = 0.0;
                    }
                } else {
                    // Delayed: m kept, a gradient step plus a c-fraction of the old momentum.
                    let k = c * beta;
                    for (((x, m), d), g) in it {
                        *d += g;
                        *x -= eps * (k * *m + g / n);
                    }
                }
            }
        }
        self.t += 1;
    }

    /// Outer steps taken.
    pub fn steps_taken(&self) -> u64 {
        self.t
    }

    /// f32 values of state held (m and Delta).
    pub fn state_len(&self) -> usize {
        self.m.len() + self.delta.len()
    }

    /// The state for a checkpoint: named tensors (the step count travels apart).
    pub fn state_tensors(&self) -> Vec<(&'static str, &[f32])> {
        let mut v = Vec::new();
        if !self.m.is_empty() {
            v.push(("m", &self.m[..]));
        }
        if !self.delta.is_empty() {
            v.push(("delta", &self.delta[..]));
        }
        v
    }

    /// Restores `t` and the tensors [`OuterOpt::state_tensors`] named.
    pub fn load_state(&mut self, t: u64, get: impl Fn(&str) -> Result<Vec<f32>>) -> Result<()> {
        for (name, buf) in [("m", &mut self.m), ("delta", &mut self.delta)] {
            if buf.is_empty() {
                continue;
            }
            let saved = get(name)?;
            ensure!(
                saved.len() == buf.len(),
                "checkpointed outer {name} has {} values, the model {}",
                saved.len(),
                buf.len()
            );
            buf.copy_from_slice(&saved);
        }
        self.t = t;
        Ok(())
    }
}

#[cfg(test)]
#[path = "outer_tests.rs"]
mod tests;
