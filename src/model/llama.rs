//! The llama blocks' forward and backward over the flat buffers (the GPT-2
//! blocks are in gpt.rs; [`super::Gpt`] dispatches on `cfg.arch`).
//!
//! Block (pre-norm, Llama):  x = x + o_proj(attn(rope(qkv_proj(rmsnorm_1(x)))))
//!                           x = x + down_proj(silu(gate(h)) * up(h)),  h = rmsnorm_2(x)
//! Head:                     logits = rmsnorm_f(x) W^T, W the token embedding
//!                           (tied) or `lm_head.weight`.
//!
//! No biases, no position embedding (positions are the rotation of q and k),
//! grouped-query attention when `n_kv_head < n_head`.

use super::config::{RMS_EPS, ROPE_THETA};
use super::layout::ParamLayout;
use super::ops::{attention, embedding, matmul, rmsnorm, rope, swiglu};
use super::profile::Timer;
use super::GptConfig;
use rayon::prelude::*;

/// What one llama block saves for the backward.
#[derive(Default)]
pub struct BlockActs {
    /// Block input normalised (attention's input) and its 1/rms per row.
    pub ln1: Vec<f32>,
    pub ln1_rstd: Vec<f32>,
    /// q | k | v per token, q and k rotated: `[rows, c + 2 kv]`.
    pub qkv: Vec<f32>,
    pub probs: Vec<f32>,
    pub atty: Vec<f32>,
    /// Residual stream after the attention branch.
    pub res1: Vec<f32>,
    pub ln2: Vec<f32>,
    pub ln2_rstd: Vec<f32>,
    /// gate | up projections `[rows, 2 f]` and their SwiGLU `[rows, f]`.
    pub gu: Vec<f32>,
    pub h: Vec<f32>,
    /// Residual stream after the MLP branch: the next block's input.
    pub res2: Vec<f32>,
}

/// Saved activations and backward scratch of the llama model, for up to
/// `rows` tokens; allocated once for the largest (batch, seq) seen.
#[derive(Default)]
pub struct Acts {
    pub rows: usize,
    pub probs_len: usize,
    pub tokens: Vec<u32>,
    pub x0: Vec<f32>,
    pub blocks: Vec<BlockActs>,
    pub lnf: Vec<f32>,
    pub lnf_rstd: Vec<f32>,
    /// Logits `[rows, vocab]`; after a training forward, d(loss)/d(logits).
    pub logits: Vec<f32>,
    pub losses: Vec<f32>,
    pub branch: Vec<f32>,
    // Backward scratch.
    pub dres: Vec<f32>,
    pub dln: Vec<f32>,
    pub dqkv: Vec<f32>,
    pub dprobs: Vec<f32>,
    pub datty: Vec<f32>,
    pub dh: Vec<f32>,
    pub dgu: Vec<f32>,
    /// cos / sin of the rotary embedding for positions `0..ctx`.
    pub rope: rope::Table,
}

/// Widths: residual c, packed qkv row ld, MLP f.
fn widths(cfg: &GptConfig) -> (usize, usize, usize) {
    (cfg.n_embd, cfg.n_embd + 2 * cfg.kv_width(), cfg.ffn_width())
}

impl Acts {
    /// Make room for `b` sequences of `t` tokens; a no-op when it fits.
    pub fn ensure(&mut self, cfg: &GptConfig, b: usize, t: usize) {
        let (rows, probs_len) = (b * t, b * cfg.n_head * t * t);
        if rows <= self.rows && probs_len <= self.probs_len {
            return;
        }
        let (rows, probs_len) = (rows.max(self.rows), probs_len.max(self.probs_len));
        let ((c, ld, f), v) = (widths(cfg), cfg.vocab_size);
        let z = |n: usize| vec![0.0f32; n];
        *self = Acts {
            rows,
            probs_len,
            tokens: vec![0; rows],
            x0: z(rows * c),
            blocks: (0..cfg.n_layer)
                .map(|_| BlockActs {
                    ln1: z(rows * c),
                    ln1_rstd: z(rows),
                    qkv: z(rows * ld),
                    probs: z(probs_len),
                    atty: z(rows * c),
                    res1: z(rows * c),
                    ln2: z(rows * c),
                    ln2_rstd: z(rows),
                    gu: z(rows * 2 * f),
                    h: z(rows * f),
                    res2: z(rows * c),
                })
                .collect(),
            lnf: z(rows * c),
            lnf_rstd: z(rows),
            logits: z(rows * v),
            losses: z(rows),
            branch: z(rows * c),
            dres: z(rows * c),
            dln: z(rows * c),
            dqkv: z(rows * ld),
            dprobs: z(probs_len),
            datty: z(rows * c),
            dh: z(rows * f),
            dgu: z(rows * 2 * f),
            rope: rope::Table::new(cfg.ctx, cfg.head_size(), ROPE_THETA),
        };
    }

    /// Bytes [`Acts::ensure`] allocates, without allocating (f64: no overflow).
    pub fn bytes_for(cfg: &GptConfig, b: usize, t: usize) -> f64 {
        let (b, t) = (b as f64, t as f64);
        let (c, ld, f) = widths(cfg);
        let (c, ld, f, v, l, h) =
            (c as f64, ld as f64, f as f64, cfg.vocab_size as f64, cfg.n_layer as f64, cfg.n_head as f64);
        let (rows, probs) = (b * t, b * h * t * t);
        // Per block: ln1, atty, res1, ln2, res2; qkv; gu, h; 2 norm statistics; probs.
        let block = rows * (5.0 * c + ld + 3.0 * f + 2.0) + probs;
        // x0, lnf, branch, dres, dln, datty; dqkv; dh, dgu; lnf statistics, losses; logits; dprobs.
        let top = rows * (6.0 * c + ld + 3.0 * f + 2.0 + v) + probs;
        let rope = cfg.ctx as f64 * cfg.head_size() as f64;
        4.0 * (l * block + top + rope) + 4.0 * rows
    }

    /// Bytes held, for memory reports.
    pub fn bytes(&self) -> usize {
        let per_block: usize = (self.blocks.iter())
            .map(|a| {
                [&a.ln1, &a.ln1_rstd, &a.qkv, &a.probs, &a.atty, &a.res1, &a.ln2, &a.ln2_rstd, &a.gu, &a.h, &a.res2]
                    .iter()
                    .map(|v| v.len())
                    .sum::<usize>()
            })
            .sum();
        let top: usize = [
            &self.x0,
            &self.lnf,
            &self.lnf_rstd,
            &self.logits,
            &self.losses,
            &self.branch,
            &self.dres,
            &self.dln,
            &self.dqkv,
            &self.dprobs,
            &self.datty,
            &self.dh,
            &self.dgu,
            &self.rope.cos,
            &self.rope.sin,
        ]
        .iter()
        .map(|v| v.len())
        .sum();
        4 * (per_block + top) + 4 * self.tokens.len()
    }
}

fn dims(cfg: &GptConfig, b: usize, t: usize) -> attention::Dims {
    attention::Dims { b, t, c: cfg.n_embd, heads: cfg.n_head, kv_heads: cfg.kv_heads() }
}

/// The LM head's weight: the token embedding when tied.
fn head(l: &ParamLayout) -> std::ops::Range<usize> {
    l.lm_head.clone().unwrap_or(l.wte.clone())
}

/// `out = a + b`, element-wise.
fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
    out.par_chunks_mut(4096).zip(a.par_chunks(4096)).zip(b.par_chunks(4096)).for_each(|((o, a), b)| {
        for ((o, a), b) in o.iter_mut().zip(a).zip(b) {
            *o = a + b;
        }
    });
}

/// Forward of `inputs` (`[b*t]`); leaves the logits in `a.logits`.
pub fn forward(cfg: &GptConfig, l: &ParamLayout, p: &[f32], a: &mut Acts, inputs: &[u32], b: usize, t: usize) {
    assert!(t <= cfg.ctx, "sequence of {t} tokens exceeds the context length {}", cfg.ctx);
    assert_eq!(inputs.len(), b * t, "inputs must hold batch x seq tokens");
    a.ensure(cfg, b, t);
    let ((c, ld, f), v, n) = (widths(cfg), cfg.vocab_size, b * t);
    let d = dims(cfg, b, t);
    let mut tm = Timer::start();
    a.tokens[..n].copy_from_slice(inputs);
    embedding::forward_tokens(&mut a.x0, inputs, &p[l.wte.clone()], c);
    tm.mark("embedding fwd");
    for (i, r) in l.llama_blocks.iter().enumerate() {
        let (done, rest) = a.blocks.split_at_mut(i);
        let x: &[f32] = if i == 0 { &a.x0[..n * c] } else { &done[i - 1].res2[..n * c] };
        let s = &mut rest[0];
        rmsnorm::forward(&mut s.ln1, &mut s.ln1_rstd, x, &p[r.attn_norm.clone()], c, RMS_EPS);
        tm.mark("rmsnorm fwd");
        matmul::linear_forward(&mut s.qkv, &s.ln1[..n * c], &p[r.qkv.clone()], None, n, c, ld);
        tm.mark("matmul qkv fwd");
        // q and k are consecutive heads at the start of each row: rotate both at once.
        rope::apply(&mut s.qkv[..n * ld], ld, cfg.n_head + cfg.kv_heads(), t, &a.rope, false);
        tm.mark("rope fwd");
        attention::forward(&mut s.atty, &mut s.probs, &s.qkv[..n * ld], d);
        tm.mark("attention fwd");
        matmul::linear_forward(&mut a.branch, &s.atty[..n * c], &p[r.o.clone()], None, n, c, c);
        tm.mark("matmul attn-proj fwd");
        add(&mut s.res1[..n * c], x, &a.branch[..n * c]);
        rmsnorm::forward(&mut s.ln2, &mut s.ln2_rstd, &s.res1[..n * c], &p[r.mlp_norm.clone()], c, RMS_EPS);
        tm.mark("residual+rmsnorm fwd");
        matmul::linear_forward(&mut s.gu, &s.ln2[..n * c], &p[r.gate_up.clone()], None, n, c, 2 * f);
        tm.mark("matmul gate-up fwd");
        swiglu::forward(&mut s.h, &s.gu[..n * 2 * f], f);
        tm.mark("swiglu fwd");
        matmul::linear_forward(&mut a.branch, &s.h[..n * f], &p[r.down.clone()], None, n, f, c);
        tm.mark("matmul down fwd");
        add(&mut s.res2[..n * c], &s.res1[..n * c], &a.branch[..n * c]);
        tm.mark("residual fwd");
    }
    let last = a.blocks.last().map_or(&a.x0, |s| &s.res2);
    rmsnorm::forward(&mut a.lnf, &mut a.lnf_rstd, &last[..n * c], &p[l.lnf_w.clone()], c, RMS_EPS);
    tm.mark("rmsnorm fwd");
    matmul::linear_forward(&mut a.logits, &a.lnf[..n * c], &p[head(l)], None, n, c, v);
    tm.mark("matmul lm-head fwd");
}

/// Backward of the last training forward (`a.logits` holds dL/dlogits);
/// ADDS the gradients to `g`.
pub fn backward(cfg: &GptConfig, l: &ParamLayout, p: &[f32], g: &mut [f32], a: &mut Acts, b: usize, t: usize) {
    let ((c, ld, f), v, n) = (widths(cfg), cfg.vocab_size, b * t);
    let d = dims(cfg, b, t);
    let mut tm = Timer::start();
    let (dln, logits, lnf) = (&mut a.dln[..n * c], &a.logits[..n * v], &a.lnf[..n * c]);
    matmul::linear_backward(Some(dln), &mut g[head(l)], None, logits, lnf, &p[head(l)], n, c, v);
    tm.mark("matmul lm-head bwd");
    let dres = &mut a.dres[..n * c];
    dres.fill(0.0);
    let last = a.blocks.last().map_or(&a.x0, |s| &s.res2);
    let (w, dw) = (&p[l.lnf_w.clone()], &mut g[l.lnf_w.clone()]);
    rmsnorm::backward(dres, dw, &a.dln[..n * c], &last[..n * c], w, &a.lnf_rstd, c);
    tm.mark("rmsnorm bwd");
    for (i, r) in l.llama_blocks.iter().enumerate().rev() {
        let (done, rest) = a.blocks.split_at(i);
        let x: &[f32] = if i == 0 { &a.x0[..n * c] } else { &done[i - 1].res2[..n * c] };
        let s = &rest[0];
        // MLP branch: res2 = res1 + down(swiglu(gate_up(ln2(res1))))
        let (dh, down) = (&mut a.dh[..n * f], &p[r.down.clone()]);
        matmul::linear_backward(Some(dh), &mut g[r.down.clone()], None, dres, &s.h[..n * f], down, n, f, c);
        tm.mark("matmul down bwd");
        swiglu::backward(&mut a.dgu, &a.dh[..n * f], &s.gu[..n * 2 * f], f);
        tm.mark("swiglu bwd");
        let (dgu, gate_up) = (&a.dgu[..n * 2 * f], &p[r.gate_up.clone()]);
        let dw = &mut g[r.gate_up.clone()];
        matmul::linear_backward(Some(&mut a.dln), dw, None, dgu, &s.ln2[..n * c], gate_up, n, c, 2 * f);
        tm.mark("matmul gate-up bwd");
        let (w, dw) = (&p[r.mlp_norm.clone()], &mut g[r.mlp_norm.clone()]);
        rmsnorm::backward(dres, dw, &a.dln[..n * c], &s.res1[..n * c], w, &s.ln2_rstd, c);
        tm.mark("rmsnorm bwd");
        // Attention branch: res1 = x + o(attn(rope(qkv(ln1(x)))))
        let (datty, o) = (&mut a.datty[..n * c], &p[r.o.clone()]);
        matmul::linear_backward(Some(datty), &mut g[r.o.clone()], None, dres, &s.atty[..n * c], o, n, c, c);
        tm.mark("matmul attn-proj bwd");
        attention::backward(&mut a.dqkv, &mut a.dprobs, &a.datty[..n * c], &s.qkv[..n * ld], &s.probs, d);
        tm.mark("attention bwd");
        rope::apply(&mut a.dqkv[..n * ld], ld, cfg.n_head + cfg.kv_heads(), t, &a.rope, true);
        tm.mark("rope bwd");
        let (dqkv, qkv) = (&a.dqkv[..n * ld], &p[r.qkv.clone()]);
        let dw = &mut g[r.qkv.clone()];
        matmul::linear_backward(Some(&mut a.dln), dw, None, dqkv, &s.ln1[..n * c], qkv, n, c, ld);
        tm.mark("matmul qkv bwd");
        let (w, dw) = (&p[r.attn_norm.clone()], &mut g[r.attn_norm.clone()]);
        rmsnorm::backward(dres, dw, &a.dln[..n * c], x, w, &s.ln1_rstd, c);
        tm.mark("rmsnorm bwd");
    }
    embedding::backward_tokens(&mut g[l.wte.clone()], dres, &a.tokens[..n], c);
    tm.mark("embedding bwd");
}
