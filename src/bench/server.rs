//! `lowcomm bench --what server`: is async DiLoCo's parameter server a
//! bottleneck? Measured in the same run on this machine: the server's work
//! per update (one outer step on a pseudo-gradient, Algorithm 2 line 17,
//! plus the copy of theta it hands back to the worker) for the micro and
//! small presets, next to one worker's inner loop of H = 50 training steps
//! on micro (H x the median of timed steps of [`crate::bench::run`]'s work).
//! The bar: the server's share below 5% at H = 50 on micro.
//!
//! The outer optimizers timed are Nesterov (DiLoCo's) and Delayed Nesterov
//! (Algorithm 3), which keeps the most state (momentum and buffer); both
//! are `optim::OuterOpt`, the code the server runs.

use crate::model::ParamLayout;
use crate::optim::{OuterConfig, OuterKind, OuterOpt};
use anyhow::Result;
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// One worker's inner steps per round in the comparison (the paper's H).
pub const H: u64 = 50;

/// The server's work per update for one preset and outer optimizer.
#[derive(Clone, Debug)]
pub struct ServerApply {
    /// The preset (micro, small).
    pub preset: String,
    /// The outer optimizer.
    pub outer: OuterKind,
    /// Parameters of the model.
    pub params: usize,
    /// Median seconds of one outer step plus the model copy handed back.
    pub apply_s: f64,
}

/// Share of one worker's round (`h` inner steps of `step_s` seconds each)
/// that one server update of `apply_s` seconds takes.
pub fn share(apply_s: f64, step_s: f64, h: u64) -> f64 {
    apply_s / (h as f64 * step_s)
}

/// Times the server's per-update work on `preset`'s model: `steps` timed
/// updates after `warmup` untimed ones, with `outer`.
pub fn apply_time(preset: &str, outer: OuterKind, steps: usize, warmup: usize) -> Result<ServerApply> {
    let (cfg, _) = crate::bench::bench_shape(preset)?;
    let n = ParamLayout::new(&cfg).len;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(3);
    let mut theta: Vec<f32> = (0..n).map(|_| rng.random_range(-0.1..0.1)).collect();
    // A pseudo-gradient of the size a round of inner steps leaves.
    let delta: Vec<f32> = (0..n).map(|_| rng.random_range(-1e-3..1e-3)).collect();
    let mut opt = OuterOpt::new(OuterConfig { kind: outer, ..OuterConfig::default() }, n);
    let mut times = Vec::with_capacity(steps);
    for s in 0..warmup + steps.max(1) {
        let t0 = Instant::now();
        opt.step(&mut theta, &delta);
        let reply = theta.clone();
        let dt = t0.elapsed().as_secs_f64();
        std::hint::black_box(reply);
        if s >= warmup {
            times.push(dt);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(ServerApply { preset: preset.into(), outer, params: n, apply_s: times[times.len() / 2] })
}

/// Every `RESULT` line of the benchmark: the server's update time on micro
/// and small with both outer optimizers, each against one micro worker's
/// round of H steps timed in this run.
pub fn run(steps: usize, warmup: usize) -> Result<Vec<String>> {
    let worker = crate::bench::run(&crate::bench::StepConfig::native("micro"), steps.max(1), warmup)?;
    let round_s = H as f64 * worker.median_step_s;
    let mut lines = Vec::new();
    for preset in ["micro", "small"] {
        for outer in [OuterKind::Nesterov, OuterKind::Dn] {
            // Many more server updates than training steps: each is short.
            let a = apply_time(preset, outer, 10 * steps.max(1), warmup)?;
            lines.push(format!(
                "RESULT server_apply preset={} outer={} params={} apply_s={:.5} micro_worker_round_s={round_s:.3} (H={H} x median step {:.4} s) share={:.2}% (bar < 5% for micro)",
                a.preset,
                a.outer.name(),
                a.params,
                a.apply_s,
                worker.median_step_s,
                100.0 * share(a.apply_s, worker.median_step_s, H)
            ));
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_one_update_over_a_round_of_h_steps() {
        // 10 ms per update against 50 steps of 0.1 s (a 5 s round): 0.2%.
        assert!((share(0.01, 0.1, 50) - 0.002).abs() < 1e-15);
        // H = 1: the update against a single step.
        assert_eq!(share(0.5, 2.0, 1), 0.25);
    }

    #[test]
    fn apply_time_measures_the_presets_model() {
        let a = apply_time("nano", OuterKind::Dn, 3, 1).unwrap();
        assert_eq!(a.params, ParamLayout::new(&crate::model::GptConfig::nano()).len);
        assert!(a.apply_s > 0.0 && a.apply_s.is_finite(), "{}", a.apply_s);
        assert!(apply_time("huge", OuterKind::Sgd, 1, 0).unwrap_err().to_string().contains("use micro or small"));
    }
}
