//! `lowcomm bench --breakdown`: where one training step's time goes, per
//! kernel (forward and backward per op kind, matmuls by shape), plus the
//! host line every step benchmark prints: instruction-set level, cores, and
//! the achieved GFLOP/s next to a single-core GEMM peak measured in the same
//! run, so a reader can tell what fraction of the machine the step uses.

use crate::bench::bench_shape;
use crate::model::isa::{self, Levels};
use crate::model::ops::matmul::{gemm, Threads, View};
use crate::model::profile::{self, Timer};
use crate::model::{Gpt, GptConfig};
use crate::optim::{AdamW, AdamWConfig, DecaySegments, Optimizer};
use anyhow::Result;
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// What the host offers, measured in this run.
#[derive(Clone, Copy, Debug)]
pub struct Host {
    /// Instruction-set levels in use.
    pub levels: Levels,
    /// Threads rayon runs on (the cores the step uses).
    pub cores: usize,
    /// Best single-thread GEMM rate of a 512^3 f32 product, GFLOP/s.
    pub gemm_peak_1core: f64,
}

impl Host {
    /// Probe the host (about 0.1 s).
    pub fn probe() -> Result<Host> {
        Ok(Host { levels: isa::active()?, cores: rayon::current_num_threads(), gemm_peak_1core: gemm_peak(512, 12) })
    }

    /// The `HOST ...` line, with the step's achieved rate against the peak.
    pub fn line(&self, step_gflops: f64) -> String {
        let l = self.levels;
        format!(
            "HOST isa={} cpu_isa={} gemm_isa={} kernels_isa={} cores={} gemm_peak_1core_gflops={:.1} step_gflops={:.1} of_peak={:.0}%",
            l.step().label(),
            l.cpu.label(),
            l.gemm.label(),
            l.kernels.label(),
            self.cores,
            self.gemm_peak_1core,
            step_gflops,
            100.0 * step_gflops / (self.gemm_peak_1core * self.cores as f64)
        )
    }
}

/// Best rate of `reps` single-thread `s x s x s` products, GFLOP/s.
pub fn gemm_peak(s: usize, reps: usize) -> f64 {
    let a: Vec<f32> = (0..s * s).map(|i| (i % 17) as f32 * 0.01).collect();
    let mut c = vec![0.0f32; s * s];
    let mut best = f64::MAX;
    for _ in 0..reps + 2 {
        let t0 = Instant::now();
        gemm(&mut c, s, View::rows(&a, s), View::rows(&a, s), s, s, s, false, Threads::One);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    2.0 * (s * s * s) as f64 / best / 1e9
}

/// One row of the breakdown.
#[derive(Clone, Debug)]
pub struct Row {
    /// Kernel label (see `src/model/gpt.rs`'s marks), with its shape.
    pub kernel: String,
    /// Mean seconds per step.
    pub s_per_step: f64,
    /// Calls per step.
    pub calls: f64,
}

/// Per-kernel time of `steps` profiled steps after `warmup` unprofiled
/// ones; returns the rows (largest first) and the mean step time.
pub fn run(preset: &str, steps: usize, warmup: usize) -> Result<(Vec<Row>, f64)> {
    let (cfg, b) = bench_shape(preset)?;
    let t = cfg.ctx;
    let mut model = Gpt::new(cfg.clone(), 0)?;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
    let x: Vec<u32> = (0..b * t).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let y: Vec<u32> = (0..b * t).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let mut opt = AdamW::new(AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 }, model.num_params());
    let decay = DecaySegments::new(model.layout.decay_ranges());
    let mut total = 0.0;
    for s in 0..warmup + steps {
        if s == warmup {
            profile::enable(true);
        }
        let t0 = Instant::now();
        let mut tm = Timer::start();
        model.zero_grads();
        tm.mark("zero grads");
        model.forward_backward(&x, &y, b, t, 1.0);
        let mut tm = Timer::start();
        crate::optim::clip_global_norm(model.grads_mut(), 1.0);
        tm.mark("grad clip");
        let (params, grads) = model.params_and_grads();
        opt.step(params, grads, 1e-3, &decay);
        tm.mark("optimizer (AdamW)");
        if s >= warmup {
            total += t0.elapsed().as_secs_f64();
        }
    }
    let got = profile::take();
    profile::enable(false);
    let n = steps as f64;
    let mut rows: Vec<Row> = got
        .into_iter()
        .map(|(k, s, c)| Row {
            kernel: format!("{k}{}", shape(k, &cfg, b * t)),
            s_per_step: s / n,
            calls: c as f64 / n,
        })
        .collect();
    let marked: f64 = rows.iter().map(|r| r.s_per_step).sum();
    rows.push(Row {
        kernel: "unmarked (loss mean, loop)".into(),
        s_per_step: (total / n - marked).max(0.0),
        calls: 0.0,
    });
    rows.sort_by(|a, b| b.s_per_step.total_cmp(&a.s_per_step));
    Ok((rows, total / n))
}

/// Seconds of the gradient norm over `n` values as the clip computes it
/// (optim/clip.rs: eight running sums a chunk) and, the baseline, with one
/// running sum a chunk (what the clip did before): the median of
/// `reps` each, every repetition after a pass over a 64 MiB buffer so the
/// values come from memory, as after a micro-batch.
pub fn norm_against_one_sum(n: usize, reps: usize) -> (f64, f64) {
    let g: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 * 1e-6).collect();
    let mut flush = vec![0u8; 64 << 20];
    let mut time = |f: &dyn Fn(&[f32]) -> f64| {
        let mut s: Vec<f64> = (0..reps)
            .map(|r| {
                flush.iter_mut().step_by(64).for_each(|x| *x = x.wrapping_add(r as u8));
                let t0 = Instant::now();
                std::hint::black_box(f(std::hint::black_box(&g)));
                t0.elapsed().as_secs_f64()
            })
            .collect();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    let lanes = time(&|g| crate::optim::sum_of_squares(g));
    let one = time(&|g| {
        use rayon::prelude::*;
        let per_chunk = |c: &[f32]| c.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>();
        g.par_chunks(crate::optim::CHUNK).map(per_chunk).collect::<Vec<f64>>().iter().sum()
    });
    (lanes, one)
}

/// The GEMM shape of a matmul label, ` [m x k] x [k x n]` (forward shapes).
fn shape(label: &str, cfg: &GptConfig, n: usize) -> String {
    let (c, v, f) = (cfg.n_embd, cfg.vocab_size, cfg.ffn_width());
    let (k, o) = match label.split_whitespace().nth(1) {
        Some("qkv") if label.starts_with("matmul") => (c, c + 2 * cfg.kv_width()),
        Some("attn-proj") => (c, c),
        Some("fc") => (c, 4 * c),
        Some("fc-proj") => (4 * c, c),
        Some("gate-up") => (c, 2 * f),
        Some("down") => (f, c),
        Some("lm-head") => (c, v),
        _ => return String::new(),
    };
    format!(" [{n}x{k}]x[{k}x{o}]")
}

/// The breakdown as a Markdown table.
pub fn table(rows: &[Row], step_s: f64) -> String {
    let mut out = String::from("| kernel | ms/step | share | calls/step |\n|---|---|---|---|\n");
    for r in rows {
        out += &format!(
            "| {} | {:.2} | {:.1}% | {:.0} |\n",
            r.kernel,
            1e3 * r.s_per_step,
            100.0 * r.s_per_step / step_s,
            r.calls
        );
    }
    out + &format!("| **step** | {:.2} | 100% | |\n", 1e3 * step_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_name_the_gemm_of_each_matmul() {
        let cfg = GptConfig::micro();
        assert_eq!(shape("matmul fc fwd", &cfg, 2048), " [2048x256]x[256x1024]");
        assert_eq!(shape("matmul lm-head bwd", &cfg, 8), " [8x256]x[256x4096]");
        assert_eq!(shape("layernorm fwd", &cfg, 8), "");
    }

    #[test]
    fn table_shares_add_up_to_the_step() {
        let rows = vec![
            Row { kernel: "a".into(), s_per_step: 0.003, calls: 2.0 },
            Row { kernel: "b".into(), s_per_step: 0.001, calls: 1.0 },
        ];
        let t = table(&rows, 0.004);
        assert!(t.contains("| a | 3.00 | 75.0% | 2 |"), "{t}");
        assert!(t.contains("| b | 1.00 | 25.0% | 1 |"), "{t}");
    }

    #[test]
    fn breakdown_covers_every_kernel_kind_of_a_step() {
        let _g = profile::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (rows, step) = run("nano", 1, 0).unwrap();
        assert!(step > 0.0);
        for k in ["attention bwd", "gelu fwd", "layernorm bwd", "xent", "embedding", "optimizer", "matmul fc fwd"] {
            assert!(rows.iter().any(|r| r.kernel.starts_with(k)), "{k} missing");
        }
    }
}
