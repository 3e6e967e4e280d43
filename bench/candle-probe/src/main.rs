//! candle-probe: lowcomm's `micro` / `small` GPT presets trained with candle
//! 0.11 on the CPU, to measure how close candle gets to PyTorch eager.
//!
//!     candle-probe micro|small [steps] [stock|fused]
//!
//! `stock` uses only candle ops (primitive-op LayerNorm, `gelu_erf`,
//! `candle_nn::ops::softmax` with an additive -inf mask, `candle_nn::loss::
//! cross_entropy`); `fused` swaps those four for the custom ops in
//! `kernels.rs`. Everything else (matmuls, embedding, layout copies,
//! autograd, AdamW) is candle's in both.

mod kernels;

use anyhow::{bail, Result};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use mimalloc::MiMalloc;
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering;
use std::time::Instant;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

#[derive(Clone, Copy, Debug)]
pub struct Cfg {
    pub vocab: usize,
    pub d: usize,
    pub layers: usize,
    pub heads: usize,
    pub ctx: usize,
    pub batch: usize,
}

pub fn preset(name: &str) -> Result<Cfg> {
    Ok(match name {
        "micro" => Cfg { vocab: 4096, d: 256, layers: 4, heads: 4, ctx: 128, batch: 16 },
        "small" => Cfg { vocab: 4096, d: 512, layers: 6, heads: 8, ctx: 256, batch: 8 },
        _ => bail!("unknown preset {name} (micro|small)"),
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    Stock,
    Fused,
}

struct Block {
    ln1_w: Var,
    ln1_b: Var,
    qkv_w: Var,
    qkv_b: Var,
    proj_w: Var,
    proj_b: Var,
    ln2_w: Var,
    ln2_b: Var,
    fc_w: Var,
    fc_b: Var,
    fc2_w: Var,
    fc2_b: Var,
}

pub struct Gpt {
    cfg: Cfg,
    variant: Variant,
    wte: Var,
    wpe: Var,
    blocks: Vec<Block>,
    lnf_w: Var,
    lnf_b: Var,
    /// (T, T) additive mask, 0 on and below the diagonal, -inf above (stock only).
    mask: Tensor,
}

/// Forward-pass wall time by category (seconds, summed over calls).
#[derive(Default, Clone, Copy)]
pub struct FwdProfile {
    pub matmul: f64,
    pub norm_act: f64,
    pub layout: f64,
    pub other: f64,
}

fn timed<T>(acc: &mut f64, f: impl FnOnce() -> candle_core::Result<T>) -> candle_core::Result<T> {
    let t = Instant::now();
    let r = f();
    *acc += t.elapsed().as_secs_f64();
    r
}

struct Init {
    rng: rand_pcg::Pcg64,
}

impl Init {
    fn normal(&mut self, shape: &[usize], std: f32) -> Result<Var> {
        let n: usize = shape.iter().product();
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            // Box-Muller
            let u1: f32 = self.rng.random::<f32>().max(1e-12);
            let u2: f32 = self.rng.random::<f32>();
            let r = (-2.0 * u1.ln()).sqrt();
            let th = 2.0 * std::f32::consts::PI * u2;
            v.push(r * th.cos() * std);
            if v.len() < n {
                v.push(r * th.sin() * std);
            }
        }
        Ok(Var::from_tensor(&Tensor::from_vec(v, shape, &Device::Cpu)?)?)
    }
    fn fill(&mut self, shape: &[usize], value: f32) -> Result<Var> {
        Ok(Var::from_tensor(&(Tensor::ones(shape, DType::F32, &Device::Cpu)? * value as f64)?)?)
    }
}

impl Gpt {
    pub fn new(cfg: Cfg, variant: Variant, seed: u64) -> Result<Self> {
        let mut init = Init { rng: rand_pcg::Pcg64::seed_from_u64(seed) };
        let d = cfg.d;
        let std = 0.02;
        let wte = init.normal(&[cfg.vocab, d], std)?;
        let wpe = init.normal(&[cfg.ctx, d], std)?;
        let mut blocks = Vec::new();
        for _ in 0..cfg.layers {
            blocks.push(Block {
                ln1_w: init.fill(&[d], 1.0)?,
                ln1_b: init.fill(&[d], 0.0)?,
                qkv_w: init.normal(&[3 * d, d], std)?,
                qkv_b: init.fill(&[3 * d], 0.0)?,
                proj_w: init.normal(&[d, d], std)?,
                proj_b: init.fill(&[d], 0.0)?,
                ln2_w: init.fill(&[d], 1.0)?,
                ln2_b: init.fill(&[d], 0.0)?,
                fc_w: init.normal(&[4 * d, d], std)?,
                fc_b: init.fill(&[4 * d], 0.0)?,
                fc2_w: init.normal(&[d, 4 * d], std)?,
                fc2_b: init.fill(&[d], 0.0)?,
            });
        }
        let t = cfg.ctx;
        let mask: Vec<f32> = (0..t * t).map(|k| if k % t > k / t { f32::NEG_INFINITY } else { 0.0 }).collect();
        Ok(Gpt {
            cfg,
            variant,
            wte,
            wpe,
            blocks,
            lnf_w: init.fill(&[d], 1.0)?,
            lnf_b: init.fill(&[d], 0.0)?,
            mask: Tensor::from_vec(mask, (t, t), &Device::Cpu)?,
        })
    }

    pub fn vars(&self) -> Vec<Var> {
        let mut v = vec![self.wte.clone(), self.wpe.clone()];
        for b in &self.blocks {
            v.extend([
                &b.ln1_w, &b.ln1_b, &b.qkv_w, &b.qkv_b, &b.proj_w, &b.proj_b, &b.ln2_w, &b.ln2_b, &b.fc_w,
                &b.fc_b, &b.fc2_w, &b.fc2_b,
            ]
            .map(|x| x.clone()));
        }
        v.extend([self.lnf_w.clone(), self.lnf_b.clone()]);
        v
    }

    fn layer_norm(&self, x: &Tensor, w: &Var, b: &Var) -> candle_core::Result<Tensor> {
        let eps = 1e-5;
        match self.variant {
            Variant::Fused => kernels::layer_norm(x, w.as_tensor(), b.as_tensor(), eps as f32),
            Variant::Stock => {
                // candle_nn::LayerNorm has no backward, so build it from primitives.
                let mean = x.mean_keepdim(D::Minus1)?;
                let xc = x.broadcast_sub(&mean)?;
                let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
                let xn = xc.broadcast_div(&(var + eps)?.sqrt()?)?;
                xn.broadcast_mul(w.as_tensor())?.broadcast_add(b.as_tensor())
            }
        }
    }

    fn gelu(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self.variant {
            Variant::Fused => kernels::gelu(x),
            Variant::Stock => x.gelu_erf(),
        }
    }

    fn attn_softmax(&self, att: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
        match self.variant {
            Variant::Fused => kernels::causal_softmax(att, scale as f32),
            Variant::Stock => candle_nn::ops::softmax(&(att * scale)?.broadcast_add(&self.mask)?, D::Minus1),
        }
    }

    fn loss_fn(&self, logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
        match self.variant {
            Variant::Fused => kernels::cross_entropy(logits, targets),
            Variant::Stock => candle_nn::loss::cross_entropy(logits, targets),
        }
    }

    /// Mean cross-entropy of next-token prediction. `tokens`, `targets`: u32 (B*T).
    pub fn loss(&self, tokens: &Tensor, targets: &Tensor, p: &mut FwdProfile) -> candle_core::Result<Tensor> {
        let Cfg { d, heads, batch: b, ctx: t, .. } = self.cfg;
        let hd = d / heads;
        let n = b * t;
        let linear = |x: &Tensor, w: &Var, bias: &Var, p: &mut FwdProfile| -> candle_core::Result<Tensor> {
            let y = timed(&mut p.matmul, || x.matmul(&w.as_tensor().t()?))?;
            timed(&mut p.other, || y.broadcast_add(bias.as_tensor()))
        };
        let mut x = timed(&mut p.other, || {
            let emb = self.wte.as_tensor().index_select(tokens, 0)?;
            emb.reshape((b, t, d))?.broadcast_add(self.wpe.as_tensor())?.reshape((n, d))
        })?;
        for blk in &self.blocks {
            let h = timed(&mut p.norm_act, || self.layer_norm(&x, &blk.ln1_w, &blk.ln1_b))?;
            let qkv = linear(&h, &blk.qkv_w, &blk.qkv_b, p)?;
            let (q, k, v) = timed(&mut p.layout, || {
                let qkv = qkv.reshape((b, t, 3, heads, hd))?.permute((2, 0, 3, 1, 4))?.contiguous()?;
                Ok((qkv.get(0)?, qkv.get(1)?, qkv.get(2)?))
            })?;
            let att = timed(&mut p.matmul, || q.matmul(&k.t()?))?;
            let att = timed(&mut p.norm_act, || self.attn_softmax(&att, 1.0 / (hd as f64).sqrt()))?;
            let y = timed(&mut p.matmul, || att.matmul(&v))?;
            let y = timed(&mut p.layout, || y.transpose(1, 2)?.contiguous()?.reshape((n, d)))?;
            let y = linear(&y, &blk.proj_w, &blk.proj_b, p)?;
            x = timed(&mut p.other, || x.add(&y))?;
            let h = timed(&mut p.norm_act, || self.layer_norm(&x, &blk.ln2_w, &blk.ln2_b))?;
            let f = linear(&h, &blk.fc_w, &blk.fc_b, p)?;
            let f = timed(&mut p.norm_act, || self.gelu(&f))?;
            let f = linear(&f, &blk.fc2_w, &blk.fc2_b, p)?;
            x = timed(&mut p.other, || x.add(&f))?;
        }
        let h = timed(&mut p.norm_act, || self.layer_norm(&x, &self.lnf_w, &self.lnf_b))?;
        let logits = timed(&mut p.matmul, || h.matmul(&self.wte.as_tensor().t()?))?;
        timed(&mut p.norm_act, || self.loss_fn(&logits, targets))
    }
}

/// A fixed batch of random tokens (like torch_reference.py): inputs and
/// next-token targets, each u32 (B*T).
pub fn make_batch(cfg: &Cfg, seed: u64) -> Result<(Tensor, Tensor)> {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for _ in 0..cfg.batch {
        let row: Vec<u32> = (0..=cfg.ctx).map(|_| rng.random_range(0..cfg.vocab as u32)).collect();
        xs.extend_from_slice(&row[..cfg.ctx]);
        ys.extend_from_slice(&row[1..]);
    }
    let n = cfg.batch * cfg.ctx;
    Ok((Tensor::from_vec(xs, n, &Device::Cpu)?, Tensor::from_vec(ys, n, &Device::Cpu)?))
}

fn peak_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        0.5 * (s[m - 1] + s[m])
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map(String::as_str).unwrap_or("micro");
    let steps: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(10);
    let variant = match args.get(3).map(String::as_str).unwrap_or("fused") {
        "stock" => Variant::Stock,
        "fused" => Variant::Fused,
        v => bail!("unknown variant {v} (stock|fused)"),
    };
    if steps == 0 {
        bail!("steps must be >= 1");
    }
    let cfg = preset(name)?;
    // Device::with_context installs candle's private rayon pool, so gemm, candle's
    // ops and our kernels share one set of workers (PROBE_GLOBAL_POOL=1: don't).
    if std::env::var("PROBE_GLOBAL_POOL").is_ok_and(|v| v == "1") {
        run(name, cfg, steps, variant)
    } else {
        Device::Cpu.with_context(|| run(name, cfg, steps, variant))
    }
}

fn run(name: &str, cfg: Cfg, steps: usize, variant: Variant) -> Result<()> {
    let model = Gpt::new(cfg, variant, 0)?;
    let nparams: usize = model.vars().iter().map(|v| v.elem_count()).sum();
    let (tokens, targets) = make_batch(&cfg, 1)?;
    let mut opt = AdamW::new(
        model.vars(),
        ParamsAdamW { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 },
    )?;
    let warm = 3;
    let (mut t_step, mut t_fwd, mut t_bwd, mut t_opt, mut t_kern) = (vec![], vec![], vec![], vec![], vec![]);
    let mut prof_sum = FwdProfile::default();
    let mut losses = vec![];
    for s in 0..warm + steps {
        let mut prof = FwdProfile::default();
        kernels::KERNEL_NS.store(0, Ordering::Relaxed);
        let t0 = Instant::now();
        let loss = model.loss(&tokens, &targets, &mut prof)?;
        let t1 = Instant::now();
        let grads = loss.backward()?;
        let t2 = Instant::now();
        opt.step(&grads)?;
        drop(grads);
        let t3 = Instant::now();
        let l = loss.to_scalar::<f32>()?;
        losses.push(l);
        let dt = (t3 - t0).as_secs_f64();
        eprintln!(
            "step {s} loss {l:.4} time {dt:.3}s (fwd {:.3} bwd {:.3} opt {:.3})",
            (t1 - t0).as_secs_f64(),
            (t2 - t1).as_secs_f64(),
            (t3 - t2).as_secs_f64()
        );
        if s >= warm {
            t_step.push(dt);
            t_fwd.push((t1 - t0).as_secs_f64());
            t_bwd.push((t2 - t1).as_secs_f64());
            t_opt.push((t3 - t2).as_secs_f64());
            t_kern.push(kernels::KERNEL_NS.load(Ordering::Relaxed) as f64 * 1e-9);
            prof_sum.matmul += prof.matmul;
            prof_sum.norm_act += prof.norm_act;
            prof_sum.layout += prof.layout;
            prof_sum.other += prof.other;
        }
    }
    let med = median(&t_step);
    let tokens_per_step = (cfg.batch * cfg.ctx) as f64;
    let k = steps as f64;
    eprintln!(
        "BREAKDOWN variant={variant:?} median fwd={:.1}ms bwd={:.1}ms opt={:.1}ms | fwd mean: matmul={:.1}ms norm/act/softmax/loss={:.1}ms layout-copies={:.1}ms other(bias,residual,embed)={:.1}ms | custom-kernel time per step (fwd+bwd)={:.1}ms",
        median(&t_fwd) * 1e3,
        median(&t_bwd) * 1e3,
        median(&t_opt) * 1e3,
        prof_sum.matmul / k * 1e3,
        prof_sum.norm_act / k * 1e3,
        prof_sum.layout / k * 1e3,
        prof_sum.other / k * 1e3,
        median(&t_kern) * 1e3,
    );
    let lib = match variant {
        Variant::Stock => "candle-stock",
        Variant::Fused => "candle-fused",
    };
    println!(
        "RESULT lib={lib} preset={name} params={nparams} steps={steps} tok_per_s={:.0} median_step_s={med:.4} peak_rss_mb={:.0} loss_first={:.4} loss_last={:.4} threads={} candle_num_threads={} mimalloc_purge_delay={}",
        tokens_per_step / med,
        peak_rss_mb(),
        losses[0],
        losses[losses.len() - 1],
        rayon::current_num_threads(),
        std::env::var("CANDLE_NUM_THREADS").unwrap_or_else(|_| "default".into()),
        std::env::var("MIMALLOC_PURGE_DELAY").unwrap_or_else(|_| "default".into()),
    );
    if !(losses[losses.len() - 1] < losses[0]) {
        bail!("loss did not decrease: {} -> {}", losses[0], losses[losses.len() - 1]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both variants compute the same loss and gradients on a tiny GPT.
    #[test]
    fn stock_and_fused_agree() {
        let cfg = Cfg { vocab: 64, d: 32, layers: 2, heads: 2, ctx: 16, batch: 3 };
        let (x, y) = make_batch(&cfg, 7).unwrap();
        let mut p = FwdProfile::default();
        let a = Gpt::new(cfg, Variant::Stock, 5).unwrap();
        let b = Gpt::new(cfg, Variant::Fused, 5).unwrap();
        let la = a.loss(&x, &y, &mut p).unwrap();
        let lb = b.loss(&x, &y, &mut p).unwrap();
        let (fa, fb) = (la.to_scalar::<f32>().unwrap(), lb.to_scalar::<f32>().unwrap());
        assert!((fa - fb).abs() < 1e-5, "{fa} vs {fb}");
        let (ga, gb) = (la.backward().unwrap(), lb.backward().unwrap());
        for (va, vb) in a.vars().iter().zip(b.vars()) {
            let g1 = ga.get(va.as_tensor()).expect("stock grad missing");
            let g2 = gb.get(vb.as_tensor()).expect("fused grad missing");
            let diff = (g1 - g2).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            let scale = g1.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(diff <= 1e-4 * (1.0 + scale), "grad diff {diff} (scale {scale})");
        }
    }

    /// A few optimiser steps on a fixed batch reduce the loss, in both variants.
    #[test]
    fn loss_decreases() {
        let cfg = Cfg { vocab: 64, d: 32, layers: 2, heads: 2, ctx: 16, batch: 4 };
        let (x, y) = make_batch(&cfg, 9).unwrap();
        for variant in [Variant::Stock, Variant::Fused] {
            let m = Gpt::new(cfg, variant, 3).unwrap();
            let mut opt = AdamW::new(
                m.vars(),
                ParamsAdamW { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 },
            )
            .unwrap();
            let mut p = FwdProfile::default();
            let mut ls = vec![];
            for _ in 0..10 {
                let l = m.loss(&x, &y, &mut p).unwrap();
                ls.push(l.to_scalar::<f32>().unwrap());
                opt.backward_step(&l).unwrap();
            }
            assert!(ls[9] < ls[0] - 0.3, "{variant:?}: {ls:?}");
        }
    }
}
