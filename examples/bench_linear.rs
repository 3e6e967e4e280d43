//! A/B of how the linear layers' products use the cores (issue 13): the
//! forward as one product over rayon's pool (gemm's own threading) against
//! one row block per thread, and the backward's two products one after the
//! other over the pool against side by side. Every linear layer of the
//! `lowcomm bench` shapes; rounds alternate the variants inside one process,
//! so a shared machine's load hits both alike. Prints each variant's median
//! time and the per-round new/old ratio (median and range).
//!
//!   cargo run --release --example bench_linear [ROUNDS=15] [PRESETS=micro,small]

use lowcomm::bench::bench_shape;
use lowcomm::model::ops::matmul::{linear_backward, linear_backward_pooled, linear_forward, linear_forward_pooled};
use std::time::Instant;

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::MAX, f64::min)
}

fn time(f: &mut dyn FnMut()) -> f64 {
    let t0 = Instant::now();
    f();
    t0.elapsed().as_secs_f64()
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(15), |s| s.parse())?;
    let presets = args.next().unwrap_or_else(|| "micro,small".into());
    println!(
        "host: {} threads, {}, load {}",
        rayon::current_num_threads(),
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l
                .split(':')
                .nth(1)
                .unwrap_or("")
                .trim()
                .to_string()))
            .unwrap_or_default(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("| preset | layer [n x c] -> oc | pass | old ms | new ms | new/old per round: median | range | best old ms | best new ms | best new/old |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for preset in presets.split(',') {
        let (cfg, b) = bench_shape(preset)?;
        let (n, c, v) = (b * cfg.ctx, cfg.n_embd, cfg.vocab_size);
        for (name, k, o) in
            [("qkv", c, 3 * c), ("attn-proj", c, c), ("fc", c, 4 * c), ("fc-proj", 4 * c, c), ("lm-head", c, v)]
        {
            let x: Vec<f32> = (0..n * k).map(|i| ((i as f32) * 0.618).sin()).collect();
            let w: Vec<f32> = (0..o * k).map(|i| ((i as f32) * 0.377).cos() * 0.05).collect();
            let dy: Vec<f32> = (0..n * o).map(|i| ((i as f32) * 0.271).sin()).collect();
            let (mut y, mut dx, mut dw) = (vec![0.0; n * o], vec![0.0; n * k], vec![0.0; o * k]);
            let mut t = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]]; // [pass][old, new]
            for r in 0..rounds + 1 {
                let f_old = time(&mut || linear_forward_pooled(&mut y, &x, &w, n, k, o));
                let f_new = time(&mut || linear_forward(&mut y, &x, &w, None, n, k, o));
                let b_old = time(&mut || linear_backward_pooled(&mut dx, &mut dw, &dy, &x, &w, n, k, o));
                let b_new = time(&mut || linear_backward(Some(&mut dx), &mut dw, None, &dy, &x, &w, n, k, o));
                if r > 0 {
                    // round 0 warms the buffers
                    for (p, (old, new)) in [(f_old, f_new), (b_old, b_new)].into_iter().enumerate() {
                        t[p][0].push(old);
                        t[p][1].push(new);
                    }
                }
            }
            for (p, pass) in ["fwd", "bwd"].into_iter().enumerate() {
                let mut ratio: Vec<f64> = t[p][1].iter().zip(&t[p][0]).map(|(a, b)| a / b).collect();
                ratio.sort_by(f64::total_cmp);
                println!(
                    "| {preset} | {name} [{n}x{k}] -> {o} | {pass} | {:.2} | {:.2} | {:.3} | {:.3}..{:.3} | {:.2} | {:.2} | {:.3} |",
                    1e3 * median(&t[p][0]),
                    1e3 * median(&t[p][1]),
                    median(&ratio),
                    ratio[0],
                    ratio[ratio.len() - 1],
                    1e3 * min(&t[p][0]),
                    1e3 * min(&t[p][1]),
                    min(&t[p][1]) / min(&t[p][0])
                );
            }
        }
    }
    Ok(())
}
