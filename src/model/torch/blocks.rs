//! The GPT-2 and llama forward passes as libtorch graphs over views of one
//! flat parameter tensor (autograd gives the backward). Each line mirrors
//! the native kernels' math (src/model/gpt.rs, src/model/llama.rs):
//!
//!   GPT-2:  x = wte[tok] + wpe[pos];  x += c_proj(attn(c_attn(ln_1(x))));
//!           x += mlp.c_proj(gelu_erf(c_fc(ln_2(x))));  logits = ln_f(x) wte^T
//!   llama:  x = wte[tok];  x += o_proj(attn(rope(qkv(rms_1(x)))));
//!           x += down(silu(gate(rms_2(x))) * up(rms_2(x)));  logits = rms_f(x) W^T
//!
//! Attention is libtorch's scaled-dot-product attention, causal, scaled by
//! 1/sqrt(head size), with grouped-query heads where `n_kv_head < n_head`.

use crate::model::config::{RMS_EPS, ROPE_THETA};
use crate::model::gpt::LN_EPS;
use crate::model::layout::ParamLayout;
use crate::model::ops::rope;
use crate::model::{Arch, GptConfig};
use std::ops::Range;
use tch::{Device, Kind, Tensor};

/// Logits `[b, t, vocab]` of `tokens` `[b, t]`; `weight(range)` is the
/// parameter tensor at `range` of the flat layout.
pub fn forward(
    cfg: &GptConfig,
    layout: &ParamLayout,
    weight: &dyn Fn(&Range<usize>) -> Tensor,
    rope: Option<&(Tensor, Tensor)>,
    tokens: &Tensor,
    t: usize,
) -> Tensor {
    let view = |r: &Range<usize>, shape: &[usize]| {
        let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        weight(r).view(shape.as_slice())
    };
    match cfg.arch {
        Arch::Gpt2 => gpt2(cfg, layout, &view, tokens, t),
        Arch::Llama => llama(cfg, layout, &view, rope.expect("llama blocks have rotary tables"), tokens, t),
    }
}

type View<'a> = dyn Fn(&Range<usize>, &[usize]) -> Tensor + 'a;

// `x = x + branch`, never `x += branch`: that adds in place, and autograd
// still needs the old x (the norm's backward reads it).
#[allow(clippy::assign_op_pattern)]
fn gpt2(cfg: &GptConfig, l: &ParamLayout, p: &View, tokens: &Tensor, t: usize) -> Tensor {
    let (v, c) = (cfg.vocab_size, cfg.n_embd);
    let wte = p(&l.wte, &[v, c]);
    let wpe = p(&l.wpe, &[cfg.ctx, c]).narrow(0, 0, t as i64);
    let mut x = Tensor::embedding(&wte, tokens, -1, false, false) + wpe;
    let ln = |x: &Tensor, w: &Range<usize>, b: &Range<usize>| {
        x.layer_norm([c as i64], Some(p(w, &[c])), Some(p(b, &[c])), f64::from(LN_EPS), false)
    };
    for r in &l.blocks {
        let qkv = ln(&x, &r.ln1_w, &r.ln1_b).linear(&p(&r.qkv_w, &[3 * c, c]), Some(p(&r.qkv_b, &[3 * c])));
        let y = attention(&qkv, cfg.n_head, cfg.n_head, c, None);
        x = x + y.linear(&p(&r.proj_w, &[c, c]), Some(p(&r.proj_b, &[c])));
        let h = ln(&x, &r.ln2_w, &r.ln2_b).linear(&p(&r.fc_w, &[4 * c, c]), Some(p(&r.fc_b, &[4 * c])));
        x = x + h.gelu("none").linear(&p(&r.fcproj_w, &[c, 4 * c]), Some(p(&r.fcproj_b, &[c])));
    }
    ln(&x, &l.lnf_w, &l.lnf_b).linear::<Tensor>(&wte, None)
}

#[allow(clippy::assign_op_pattern)]
fn llama(cfg: &GptConfig, l: &ParamLayout, p: &View, rope: &(Tensor, Tensor), tokens: &Tensor, t: usize) -> Tensor {
    let (v, c, kv, f) = (cfg.vocab_size, cfg.n_embd, cfg.kv_width(), cfg.ffn_width());
    let wte = p(&l.wte, &[v, c]);
    let mut x = Tensor::embedding(&wte, tokens, -1, false, false);
    let rms = |x: &Tensor, w: &Range<usize>| x.rms_norm([c as i64], Some(p(w, &[c])), f64::from(RMS_EPS));
    let (cos, sin) = (rope.0.narrow(0, 0, t as i64), rope.1.narrow(0, 0, t as i64));
    for r in &l.llama_blocks {
        let qkv = rms(&x, &r.attn_norm).linear::<Tensor>(&p(&r.qkv, &[c + 2 * kv, c]), None);
        let y = attention(&qkv, cfg.n_head, cfg.kv_heads(), c, Some((&cos, &sin)));
        x = x + y.linear::<Tensor>(&p(&r.o, &[c, c]), None);
        let gu = rms(&x, &r.mlp_norm).linear::<Tensor>(&p(&r.gate_up, &[2 * f, c]), None);
        let (gate, up) = (gu.narrow(-1, 0, f as i64), gu.narrow(-1, f as i64, f as i64));
        x = x + (gate.silu() * up).linear::<Tensor>(&p(&r.down, &[c, f]), None);
    }
    let head = l.lm_head.as_ref().map_or(wte.shallow_clone(), |h| p(h, &[v, c]));
    rms(&x, &l.lnf_w).linear::<Tensor>(&head, None)
}

/// Causal attention over a packed `[b, t, c + 2 kv]` q | k | v buffer
/// (`kv_heads` key/value heads; query head h reads h / (heads / kv_heads)),
/// q and k rotated first when `rope` holds `[t, hs]` cos and sin. Returns
/// `[b, t, c]`, heads side by side.
fn attention(qkv: &Tensor, heads: usize, kv_heads: usize, c: usize, rope: Option<(&Tensor, &Tensor)>) -> Tensor {
    let (b, t) = (qkv.size()[0], qkv.size()[1]);
    let hs = (c / heads) as i64;
    let kv = kv_heads as i64 * hs;
    let split = |start: i64, len: i64, n: usize| {
        qkv.narrow(-1, start, len).view([b, t, n as i64, hs]).transpose(1, 2) // [b, n, t, hs]
    };
    let (mut q, mut k, v) =
        (split(0, c as i64, heads), split(c as i64, kv, kv_heads), split(c as i64 + kv, kv, kv_heads));
    if let Some((cos, sin)) = rope {
        q = rotate(&q, cos, sin);
        k = rotate(&k, cos, sin);
    }
    let y = Tensor::scaled_dot_product_attention::<Tensor>(&q, &k, &v, None, 0.0, true, None, kv_heads != heads);
    y.transpose(1, 2).contiguous().view([b, t, c as i64])
}

/// Hugging Face's `rotate_half` rotation (src/model/ops/rope.rs): element
/// d < hs/2 pairs with d + hs/2.
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let (lo, hi) = (x.narrow(-1, 0, half), x.narrow(-1, half, half));
    let rotated = Tensor::cat(&[-hi, lo], -1);
    x * cos + rotated * sin
}

/// cos and sin `[ctx, hs]` (each half the native table's `[ctx, hs/2]`
/// repeated), on `device`, in the compute `kind` (an f32 table would
/// promote bf16 queries and keys back to f32).
pub fn rope_tables(cfg: &GptConfig, device: Device, kind: Kind) -> (Tensor, Tensor) {
    let table = rope::Table::new(cfg.ctx, cfg.head_size(), ROPE_THETA);
    let full = |half: &[f32]| {
        let half = Tensor::from_slice(half).view([cfg.ctx as i64, (cfg.head_size() / 2) as i64]);
        Tensor::cat(&[&half, &half], -1).to_device(device).to_kind(kind)
    };
    (full(&table.cos), full(&table.sin))
}
