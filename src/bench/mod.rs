//! `lowcomm bench`: throughput of one full training step (forward,
//! backward, AdamW) at 2048 tokens per step, float32, on this machine —
//! the same work as `shared/bench/torch_reference.py`, whose numbers are
//! the baseline (`scripts/bench_vs_torch.sh` runs both, one process each,
//! and prints the ratios).
//!
//! The other measurements of `lowcomm bench`: breakdown.rs (`--breakdown`,
//! per kernel), dct.rs (`--what dct`), server.rs (`--what server`),
//! sim_parallel.rs (`--what sim-parallel`).

pub mod breakdown;
pub mod dct;
pub mod devices;
pub mod server;
pub mod sim_parallel;

use crate::model::{ComputeDevice, ComputePrecision, Gpt, GptConfig};
use crate::optim::{AdamW, AdamWConfig, DecaySegments, Optimizer};
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// One benchmark measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchResult {
    pub preset: String,
    pub batch: usize,
    pub seq: usize,
    pub params: usize,
    pub median_step_s: f64,
    /// Median forward + backward (on libtorch: the parameters' upload
    /// and the device's work, waited for).
    pub median_fwd_bwd_s: f64,
    /// Median of the rest: the gradient's download (on libtorch) and the
    /// AdamW step on the host buffers; or, where AdamW runs on the device
    /// (`optimizer` "device"), its step there, waited for.
    pub median_host_s: f64,
    /// Median of the download alone (the gradient summed on the device
    /// brought into the host's; nothing natively).
    pub median_download_s: f64,
    pub tokens_per_s: f64,
    /// Achieved model FLOP/s (6N + attention per token).
    pub gflops: f64,
    /// Peak resident memory of this process, MB (VmHWM).
    pub peak_rss_mb: f64,
    pub loss_first: f32,
    pub loss_last: f32,
    /// Where AdamW ran: "host" (after the gradient's download), or
    /// "device" (libtorch: the steps were one device round).
    pub optimizer: &'static str,
    /// A device round's transfers, once for all the steps: the parameters
    /// and moments up before them and back after (0 on the host).
    pub round_sync_s: f64,
}

/// The benchmark's shapes, 2048 tokens per step: `micro` at 16 x 128,
/// `small` at 8 x 256, `nano` at 32 x 64, `gpt2` at 2 x 1024.
pub fn bench_shape(preset: &str) -> Result<(GptConfig, usize)> {
    Ok(match preset {
        "micro" => (GptConfig::micro(), 16),
        "small" => (GptConfig::small(), 8),
        "nano" => (GptConfig::nano(), 32),
        "gpt2" => (GptConfig::gpt2_small(), 2),
        other => bail!("no benchmark shape for preset `{other}`: use micro or small (or nano, gpt2)"),
    })
}

/// What `--what step` times: a preset's training step, its math on a device.
#[derive(Clone, Debug)]
pub struct StepConfig {
    /// A preset with a [`bench_shape`].
    pub preset: String,
    /// Sequences per step, instead of the shape's (a GPU wants more than
    /// 2048 tokens).
    pub batch: Option<usize>,
    /// Where the model's math runs.
    pub device: ComputeDevice,
    /// In which precision.
    pub precision: ComputePrecision,
}

impl StepConfig {
    /// The preset's shape on the native kernels, in f32.
    pub fn native(preset: &str) -> Self {
        Self { preset: preset.into(), batch: None, device: ComputeDevice::Native, precision: ComputePrecision::F32 }
    }
}

/// Time `steps` training steps after `warmup` untimed ones.
pub fn run(step: &StepConfig, steps: usize, warmup: usize) -> Result<BenchResult> {
    let (cfg, b) = bench_shape(&step.preset)?;
    let b = step.batch.unwrap_or(b);
    let t = cfg.ctx;
    let mut model = Gpt::new(cfg.clone(), 0)?.on(step.device, step.precision)?;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
    let data: Vec<u32> = (0..b * (t + 1)).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let (mut x, mut y) = (Vec::with_capacity(b * t), Vec::with_capacity(b * t));
    for row in data.chunks_exact(t + 1) {
        x.extend_from_slice(&row[..t]);
        y.extend_from_slice(&row[1..]);
    }
    let mut opt = AdamW::new(AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 }, model.num_params());
    let decay = DecaySegments::new(model.layout.decay_ranges());
    let (mut times, mut fwd_bwd, mut host, mut download) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut losses = Vec::new();
    // On libtorch the steps are one device round (model/device_adamw.rs),
    // as a local-update method's inner steps are: AdamW on the device, no
    // transfer of the model per step; the round's transfers are timed apart.
    let t_begin = Instant::now();
    let on_device = model.begin_device_adamw(&mut opt);
    let mut round_sync_s = t_begin.elapsed().as_secs_f64();
    for s in 0..warmup + steps {
        let t0 = Instant::now();
        model.zero_grads();
        // The loss is a host value: on a GPU, reading it waits for the backward.
        let loss = model.forward_backward(&x, &y, b, t, 1.0);
        let t1 = Instant::now();
        let dd = if on_device {
            model.device_adamw_step(&mut opt, 1e-3, &decay);
            model.wait_for_device();
            0.0
        } else {
            model.grads();
            let dd = t1.elapsed().as_secs_f64();
            let (params, grads) = model.params_and_grads();
            opt.step(params, grads, 1e-3, &decay);
            dd
        };
        let (dt, dh) = (t0.elapsed().as_secs_f64(), t1.elapsed().as_secs_f64());
        losses.push(loss);
        if s >= warmup {
            times.push(dt);
            fwd_bwd.push(dt - dh);
            host.push(dh);
            download.push(dd);
        }
        eprintln!("step {s} loss {loss:.4} time {dt:.3}s");
    }
    if on_device {
        let t_end = Instant::now();
        model.end_device_adamw(&mut opt);
        round_sync_s += t_end.elapsed().as_secs_f64();
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let med = median(&mut times);
    let tokens = (b * t) as f64;
    Ok(BenchResult {
        preset: step.preset.clone(),
        batch: b,
        seq: t,
        params: model.num_params(),
        median_step_s: med,
        median_fwd_bwd_s: median(&mut fwd_bwd),
        median_host_s: median(&mut host),
        median_download_s: median(&mut download),
        tokens_per_s: tokens / med,
        gflops: cfg.flops_per_token() * tokens / med / 1e9,
        peak_rss_mb: peak_rss_mb(),
        loss_first: losses[0],
        loss_last: *losses.last().unwrap_or(&f32::NAN),
        optimizer: if on_device { "device" } else { "host" },
        round_sync_s: if on_device { round_sync_s } else { 0.0 },
    })
}

/// Peak resident set size of this process in MB, from /proc (0 elsewhere).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Extra time the simulated runtime adds over the raw math: `steps` DDP
/// steps of one worker (one micro-batch + AdamW each) run directly, then
/// through `runtime::sim`. Returns (raw seconds, sim seconds).
pub fn sim_overhead(preset: &str, steps: u64) -> Result<(f64, f64)> {
    use crate::optim::{LrSchedule, OptimizerConfig};
    use crate::runtime::sim::SimSpec;
    use crate::strategy::{run_cluster, Method, Plan, Runtime, Worker};
    let (cfg, b) = bench_shape(preset)?;
    let t = cfg.ctx;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(1);
    let tokens: std::sync::Arc<Vec<u32>> =
        std::sync::Arc::new((0..200_000).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect());
    let worker = || Worker::new(Gpt::new(cfg.clone(), 0).unwrap(), tokens.clone(), 0..tokens.len(), b, t, 7, 0);
    let layout = crate::model::ParamLayout::new(&cfg);
    let plan = Plan::new(
        steps,
        LrSchedule::constant(1e-3),
        OptimizerConfig::default(),
        DecaySegments::new(layout.decay_ranges()),
    );
    // Alternate the two, three times each, and keep each one's fastest run:
    // both pay the same first-touch of fresh buffers, and the shared
    // machine's noise hits both alike.
    let spec = SimSpec::flat(1, 1.0, None);
    let (mut raw, mut sim) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let mut w = worker()?;
        let mut opt = plan.optimizer.try_build(w.model.num_params())?;
        let t0 = Instant::now();
        for s in 0..steps {
            w.model.zero_grads();
            w.micro_batch(1.0);
            let (params, grads) = w.model.params_and_grads();
            opt.step(params, grads, plan.schedule.lr(s), &plan.decay);
        }
        raw = raw.min(t0.elapsed().as_secs_f64());
        drop(w);
        let w = worker()?;
        let t0 = Instant::now();
        run_cluster(&Method::Ddp, &Runtime::Sim(spec.clone()), vec![w], &plan, &Default::default())?;
        sim = sim.min(t0.elapsed().as_secs_f64());
    }
    Ok((raw, sim))
}
