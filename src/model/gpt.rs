//! The GPT: parameters and gradients as two flat f32 buffers, and the
//! forward/backward pass over them (llm.c style: every step is an explicit
//! kernel call on slices; nothing is allocated once the buffers exist).
//!
//! Block (pre-LN, GPT-2):  x = x + drop(proj(attn(ln_1(x))))
//!                         x = x + drop(c_proj(gelu(c_fc(ln_2(x)))))
//! Head:                   logits = ln_f(x) wte^T   (tied to the token embedding)
//!
//! Llama blocks (`arch = "llama"`) are in llama.rs; the public methods here
//! dispatch on `cfg.arch`.

use super::activations::{Activations, BlockActs};
use super::config::Arch;
use super::device::ComputeDevice;
use super::layout::ParamLayout;
use super::llama;
use super::ops::{attention, embedding, gelu, layernorm, matmul, residual, xent};
use super::profile::Timer;
use super::random::{dropout_forward, dropout_mask, fill_normal};
use super::GptConfig;
use anyhow::{bail, Result};
use rand::SeedableRng;
use rand_pcg::Pcg64;
use std::ops::Range;

// The backward pass, a file of its own for length (it sees Gpt's fields as a child module).
mod backward;

/// LayerNorm epsilon (GPT-2's `layer_norm_epsilon`).
pub const LN_EPS: f32 = 1e-5;

/// A GPT with its parameters, gradients and activation buffers.
pub struct Gpt {
    /// Shape.
    pub cfg: GptConfig,
    /// Where each tensor lives in `params` / `grads`.
    pub layout: ParamLayout,
    /// All parameters, flat, in `layout` order.
    pub params: Vec<f32>,
    /// All gradients, same layout; accumulate until [`Gpt::zero_grads`].
    /// Read through [`Gpt::grads`] and the like (device.rs): on libtorch the
    /// micro-batches accumulate on the device, and those bring the sum here.
    pub(super) grads: Vec<f32>,
    /// Dropout's random stream (part of a checkpoint's state).
    pub dropout_rng: Pcg64,
    acts: Activations,
    llama_acts: llama::Acts,
    /// Where the forward and backward run (`native` unless [`Gpt::on_device`]).
    pub device: ComputeDevice,
    /// The libtorch model when `device` is one of libtorch's.
    #[cfg(feature = "torch")]
    pub(super) torch: Option<Box<super::torch::TorchGpt>>,
}

impl Gpt {
    /// A freshly initialised model: N(0, 0.02) matrices and embeddings,
    /// residual projections (GPT-2's `c_proj`, llama's `o_proj` and
    /// `down_proj`) N(0, 0.02 / sqrt(2 n_layer)) (GPT-2), zero biases, unit
    /// norm gains. Same seed, same bits.
    pub fn new(cfg: GptConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let layout = ParamLayout::new(&cfg);
        let mut params = vec![0.0f32; layout.len];
        let mut rng = Pcg64::seed_from_u64(seed);
        let resid_std = 0.02 / (2.0 * cfg.n_layer as f32).sqrt();
        let residual = ["c_proj.weight", "o_proj.weight", "down_proj.weight"];
        for t in &layout.tensors {
            let p = &mut params[t.range.clone()];
            if t.shape.len() == 1 {
                // norm gains 1; biases (GPT-2's LayerNorm ones included) 0
                p.fill(if t.name.ends_with("weight") { 1.0 } else { 0.0 });
            } else if t.shape.len() == 2 {
                let std = if residual.iter().any(|r| t.name.ends_with(r)) { resid_std } else { 0.02 };
                fill_normal(p, std, &mut rng);
            }
        }
        Self::from_params(cfg, params, seed)
    }

    /// A model around given parameters (e.g. loaded from a checkpoint).
    pub fn from_params(cfg: GptConfig, params: Vec<f32>, seed: u64) -> Result<Self> {
        cfg.validate()?;
        // Refuse a CPU/build/LOWCOMM_ISA mismatch here, before any kernel runs.
        super::isa::active()?;
        let layout = ParamLayout::new(&cfg);
        if params.len() != layout.len {
            bail!("parameter buffer has {} values but this model shape needs {}", params.len(), layout.len);
        }
        let grads = vec![0.0; layout.len];
        let dropout_rng = Pcg64::seed_from_u64(seed ^ 0x000D_8090_u64);
        let (acts, llama_acts) = (Activations::default(), llama::Acts::default());
        Ok(Self {
            cfg,
            layout,
            params,
            grads,
            dropout_rng,
            acts,
            llama_acts,
            device: ComputeDevice::Native,
            #[cfg(feature = "torch")]
            torch: None,
        })
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.layout.len
    }

    /// Reset the gradient accumulators to zero (the host's and, on
    /// libtorch, the device's; there the host's is cleared by the next
    /// read, which writes the device's sum over it).
    pub fn zero_grads(&mut self) {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            torch.zero_grads();
            return;
        }
        self.grads.fill(0.0);
    }

    /// Bytes of activation buffers currently held.
    pub fn activation_bytes(&self) -> usize {
        self.acts.bytes() + self.llama_acts.bytes()
    }

    /// The logits and per-token losses buffers of the last forward.
    fn outputs(&mut self) -> (&mut [f32], &mut [f32]) {
        match self.cfg.arch {
            Arch::Gpt2 => (&mut self.acts.logits, &mut self.acts.losses),
            Arch::Llama => (&mut self.llama_acts.logits, &mut self.llama_acts.losses),
        }
    }

    /// Mean cross-entropy of `targets` given `inputs` (`[b*t]` each), no
    /// gradients, no dropout.
    pub fn loss(&mut self, inputs: &[u32], targets: &[u32], b: usize, t: usize) -> f32 {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            return torch.loss(&self.params, inputs, targets, b, t);
        }
        self.forward(inputs, b, t, false);
        let (n, v) = (b * t, self.cfg.vocab_size);
        let (logits, losses) = self.outputs();
        xent::forward(&mut losses[..n], &logits[..n * v], targets, v);
        mean(&losses[..n])
    }

    /// Logits `[b*t, vocab]` for `inputs`, no dropout.
    pub fn logits(&mut self, inputs: &[u32], b: usize, t: usize) -> &[f32] {
        #[cfg(feature = "torch")]
        if self.torch.is_some() {
            // Not `if let`: a borrow returned from one branch would hold
            // `self` for the native path too (the borrow checker's NLL limit).
            return self.torch_logits(inputs, b, t);
        }
        self.forward(inputs, b, t, false);
        let v = self.cfg.vocab_size;
        &self.outputs().0[..b * t * v]
    }

    /// Forward and backward of `loss_scale x mean cross-entropy`; gradients
    /// are ADDED to the accumulated gradient (micro-batch accumulation: pass
    /// `loss_scale = 1 / micro_batches`; read the sum with [`Gpt::grads`]).
    /// Returns the unscaled mean loss.
    pub fn forward_backward(&mut self, inputs: &[u32], targets: &[u32], b: usize, t: usize, loss_scale: f32) -> f32 {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            return torch.forward_backward(&self.params, inputs, targets, (b, t), loss_scale);
        }
        self.forward(inputs, b, t, true);
        let mut tm = Timer::start();
        let (n, v) = (b * t, self.cfg.vocab_size);
        let (logits, losses) = self.outputs();
        xent::forward_backward(&mut losses[..n], &mut logits[..n * v], targets, v, loss_scale / n as f32);
        tm.mark("xent fwd+bwd");
        let loss = mean(&losses[..n]);
        match self.cfg.arch {
            Arch::Gpt2 => self.backward(b, t),
            Arch::Llama => {
                llama::backward(&self.cfg, &self.layout, &self.params, &mut self.grads, &mut self.llama_acts, b, t)
            }
        }
        loss
    }

    fn forward(&mut self, inputs: &[u32], b: usize, t: usize, train: bool) {
        if self.cfg.arch == Arch::Llama {
            llama::forward(&self.cfg, &self.layout, &self.params, &mut self.llama_acts, inputs, b, t);
            return;
        }
        let cfg = &self.cfg;
        assert!(t <= cfg.ctx, "sequence of {t} tokens exceeds the context length {}", cfg.ctx);
        assert_eq!(inputs.len(), b * t, "inputs must hold batch x seq tokens");
        self.acts.ensure(cfg, b, t);
        let (n, c, v) = (b * t, cfg.n_embd, cfg.vocab_size);
        let dims = attention::Dims::mha(b, t, c, cfg.n_head);
        let p = &self.params;
        let l = &self.layout;
        let a = &mut self.acts;
        let drop = if train { cfg.dropout } else { 0.0 };
        let mut tm = Timer::start();
        a.tokens[..n].copy_from_slice(inputs);
        embedding::forward(&mut a.x0, inputs, &p[l.wte.clone()], &p[l.wpe.clone()], t, c);
        dropout_forward(&mut a.x0[..n * c], &mut a.mask_emb, drop, &mut self.dropout_rng);
        tm.mark("embedding fwd");
        // The first LayerNorm on its own; every later one is fused into the
        // residual add before it (`residual::add_and_normalize`), which also
        // adds the bias the branch's last product left out.
        let ln = layernorm_ahead(a.blocks.first_mut(), [&mut a.lnf, &mut a.lnf_mean, &mut a.lnf_rstd], p, l, 0);
        layernorm::forward(ln.out, ln.mean, ln.rstd, &a.x0[..n * c], ln.w, ln.b, c, LN_EPS);
        tm.mark("layernorm fwd");
        for (i, r) in l.blocks.iter().enumerate() {
            let (done, rest) = a.blocks.split_at_mut(i);
            let x: &[f32] = if i == 0 { &a.x0[..n * c] } else { &done[i - 1].res2[..n * c] };
            let (s, later) = rest.split_first_mut().expect("one activation set per block");
            matmul::linear_forward(
                &mut s.qkv,
                &s.ln1[..n * c],
                &p[r.qkv_w.clone()],
                Some(&p[r.qkv_b.clone()]),
                n,
                c,
                3 * c,
            );
            tm.mark("matmul qkv fwd");
            attention::forward(&mut s.atty, &mut s.probs, &s.qkv[..n * 3 * c], dims);
            tm.mark("attention fwd");
            matmul::linear_forward(&mut a.branch, &s.atty[..n * c], &p[r.proj_w.clone()], None, n, c, c);
            tm.mark("matmul attn-proj fwd");
            let mask = dropout_mask(&mut s.mask_attn[..], n * c, drop, &mut self.dropout_rng);
            residual::add_and_normalize(
                &mut s.res1,
                &mut s.ln2,
                &mut s.ln2_mean,
                &mut s.ln2_rstd,
                x,
                &a.branch[..n * c],
                &p[r.proj_b.clone()],
                mask,
                &p[r.ln2_w.clone()],
                &p[r.ln2_b.clone()],
                LN_EPS,
            );
            tm.mark("residual+layernorm fwd");
            matmul::linear_forward(&mut s.fch, &s.ln2[..n * c], &p[r.fc_w.clone()], None, n, c, 4 * c);
            tm.mark("matmul fc fwd");
            gelu::forward_with_bias(&mut s.fch_gelu, &mut s.fch[..n * 4 * c], &p[r.fc_b.clone()]);
            tm.mark("gelu fwd");
            matmul::linear_forward(&mut a.branch, &s.fch_gelu[..n * 4 * c], &p[r.fcproj_w.clone()], None, n, 4 * c, c);
            tm.mark("matmul fc-proj fwd");
            let mask = dropout_mask(&mut s.mask_mlp[..], n * c, drop, &mut self.dropout_rng);
            // The LayerNorm after this residual: the next block's ln_1, or ln_f.
            let ln = layernorm_ahead(later.first_mut(), [&mut a.lnf, &mut a.lnf_mean, &mut a.lnf_rstd], p, l, i + 1);
            residual::add_and_normalize(
                &mut s.res2,
                ln.out,
                ln.mean,
                ln.rstd,
                &s.res1[..n * c],
                &a.branch[..n * c],
                &p[r.fcproj_b.clone()],
                mask,
                ln.w,
                ln.b,
                LN_EPS,
            );
            tm.mark("residual+layernorm fwd");
        }
        matmul::linear_forward(&mut a.logits, &a.lnf[..n * c], &p[l.wte.clone()], None, n, c, v);
        tm.mark("matmul lm-head fwd");
    }
}

/// A LayerNorm's output buffers and parameters.
struct LayerNormAt<'a> {
    out: &'a mut [f32],
    mean: &'a mut [f32],
    rstd: &'a mut [f32],
    w: &'a [f32],
    b: &'a [f32],
}

/// The LayerNorm that reads the residual stream ahead of block `i`: block
/// `i`'s `ln_1` (`block_i`: its activations) or, past the last block, `ln_f`
/// (`lnf`: its output, mean and rstd buffers).
fn layernorm_ahead<'a>(
    block_i: Option<&'a mut BlockActs>,
    lnf: [&'a mut Vec<f32>; 3],
    p: &'a [f32],
    l: &ParamLayout,
    i: usize,
) -> LayerNormAt<'a> {
    let [out, mean, rstd] = lnf;
    match block_i {
        Some(s) => {
            let r = &l.blocks[i];
            LayerNormAt {
                out: &mut s.ln1,
                mean: &mut s.ln1_mean,
                rstd: &mut s.ln1_rstd,
                w: &p[r.ln1_w.clone()],
                b: &p[r.ln1_b.clone()],
            }
        }
        None => LayerNormAt { out, mean, rstd, w: &p[l.lnf_w.clone()], b: &p[l.lnf_b.clone()] },
    }
}

/// Two disjoint mutable ranges of one buffer (`a` before `b`).
fn two_mut<'a>(buf: &'a mut [f32], a: &Range<usize>, b: &Range<usize>) -> (&'a mut [f32], &'a mut [f32]) {
    assert!(a.end <= b.start, "ranges must be ordered and disjoint");
    let (lo, hi) = buf.split_at_mut(b.start);
    (&mut lo[a.clone()], &mut hi[..b.len()])
}

fn mean(x: &[f32]) -> f32 {
    (x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64) as f32
}
