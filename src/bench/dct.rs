//! `lowcomm bench --what dct`: what DeMo's compression costs next to a
//! training step, both measured in the same run on this machine. Per step:
//! one full training step of the preset's benchmark shape (forward,
//! backward, AdamW: [`crate::bench::run`]'s work) against the DeMo
//! replicator's encode (DCT of the gradient, momentum update, top-k per
//! chunk, payload) and decode (4 members' payloads placed with the mean
//! over contributors, inverse DCT) over the whole model, chunk 64, top 32.
//! Also times one transform as GEMMs against the same transform written as
//! plain loops (docs/decisions.md).

use crate::bench::bench_shape;
use crate::model::{Gpt, ParamLayout};
use crate::optim::dct::{basis, Dct, Piece};
use crate::optim::{AdamW, AdamWConfig, DecaySegments, Optimizer};
use crate::runtime::Group;
use crate::strategy::detonation::demo::DemoReplicator;
use crate::strategy::detonation::{shard, Exchange, Replicator};
use crate::strategy::DemoSettings;
use anyhow::Result;
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// The benchmark's medians, seconds.
#[derive(Clone, Debug)]
pub struct DctBench {
    /// Parameters of the model.
    pub params: usize,
    /// One training step.
    pub step_s: f64,
    /// Encode: DCT, momentum, top-k, payload.
    pub encode_s: f64,
    /// Decode of 4 members' payloads and the inverse DCT.
    pub decode_s: f64,
    /// One forward transform as GEMMs.
    pub gemm_s: f64,
    /// The same transform as plain loops.
    pub loops_s: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `steps` timed steps of each (after `warmup`) for `preset`.
pub fn run(preset: &str, steps: usize, warmup: usize) -> Result<DctBench> {
    let (cfg, b) = bench_shape(preset)?;
    let t = cfg.ctx;
    let mut model = Gpt::new(cfg.clone(), 0)?;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
    let data: Vec<u32> = (0..b * (t + 1)).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for row in data.chunks_exact(t + 1) {
        x.extend_from_slice(&row[..t]);
        y.extend_from_slice(&row[1..]);
    }
    let n = model.num_params();
    let mut opt = AdamW::new(AdamWConfig::default(), n);
    let decay = DecaySegments::new(model.layout.decay_ranges());
    let layout = ParamLayout::new(&cfg);
    let pieces = shard::pieces(&layout, 64, &(0..n));
    let members = 4;
    let mut rep =
        DemoReplicator::new(&DemoSettings::default(), &pieces, n, Group::World, members, crate::comm::WireDtype::F32);
    let mut q = vec![0.0f32; n];
    let (mut step_t, mut enc_t, mut dec_t) = (Vec::new(), Vec::new(), Vec::new());
    for s in 0..warmup + steps {
        let t0 = Instant::now();
        model.zero_grads();
        model.forward_backward(&x, &y, b, t, 1.0);
        let (params, grads) = model.params_and_grads();
        opt.step(params, grads, 1e-3, &decay);
        let step = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let ex = rep.fold(s as u64, 1e-3, model.grads());
        let enc = t0.elapsed().as_secs_f64();
        let Exchange::Gather { group, input, mut output } = ex else { unreachable!("DeMo gathers") };
        for m in 0..members {
            output[m * input.len()..(m + 1) * input.len()].copy_from_slice(&input);
        }
        let t0 = Instant::now();
        rep.unfold(Exchange::Gather { group, input, output }, &mut q);
        let dec = t0.elapsed().as_secs_f64();
        if s >= warmup {
            step_t.push(step);
            enc_t.push(enc);
            dec_t.push(dec);
        }
        eprintln!("step {s}: train {step:.3}s encode {enc:.4}s decode {dec:.4}s");
    }
    let dct = Dct::new(pieces.clone());
    let (mut out, mut scratch) = (vec![0.0f32; n], vec![0.0f32; n]);
    let (mut gemm_t, mut loops_t) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t0 = Instant::now();
        dct.forward(model.grads(), &mut out, &mut scratch);
        gemm_t.push(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        forward_loops(&pieces, model.grads(), &mut scratch);
        loops_t.push(t0.elapsed().as_secs_f64());
    }
    let worst = out.iter().zip(&scratch).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    anyhow::ensure!(worst < 1e-3, "the two transforms disagree by {worst}");
    Ok(DctBench {
        params: n,
        step_s: median(step_t),
        encode_s: median(enc_t),
        decode_s: median(dec_t),
        gemm_s: median(gemm_t),
        loops_s: median(loops_t),
    })
}

/// The chunked DCT as plain loops (rows then columns, per block), one thread.
fn forward_loops(pieces: &[Piece], x: &[f32], y: &mut [f32]) {
    for p in pieces {
        let (dh, dw) = (basis(p.h), basis(p.w));
        let mut tmp = vec![0.0f32; p.len()];
        let src = &x[p.offset..p.offset + p.len()];
        for (seg_out, seg) in tmp.chunks_exact_mut(p.w).zip(src.chunks_exact(p.w)) {
            for (k, o) in seg_out.iter_mut().enumerate() {
                *o = seg.iter().zip(&dw[k * p.w..(k + 1) * p.w]).map(|(a, b)| a * b).sum();
            }
        }
        let dst = &mut y[p.offset..p.offset + p.len()];
        for by in 0..p.rows / p.h {
            for k in 0..p.h {
                for c in 0..p.cols {
                    dst[(by * p.h + k) * p.cols + c] =
                        (0..p.h).map(|i| dh[k * p.h + i] * tmp[(by * p.h + i) * p.cols + c]).sum();
                }
            }
        }
    }
}
