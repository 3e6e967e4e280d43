//! Experiment (issue 13, session 9): two variants of the `small` step A/B'd
//! inside one process, the variant switched step by step (A B B A A B ...),
//! so both see the same load on this shared VM; prints each variant's
//! median step and the median ratio of adjacent pairs.
//!
//!   DW_ROWS=0 cargo run --release --example ab_step -- small 12
use lowcomm::bench::bench_shape;
use lowcomm::model::ops::matmul::DW_SPLIT;
use lowcomm::model::Gpt;
use lowcomm::optim::{AdamW, AdamWConfig, DecaySegments, Optimizer};
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let preset = args.next().unwrap_or_else(|| "small".into());
    let pairs: usize = args.next().map_or(Ok(10), |s| s.parse())?;
    let (cfg, b) = bench_shape(&preset)?;
    let mut model = Gpt::new(cfg.clone(), 0)?;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
    let x: Vec<u32> = (0..b * cfg.ctx).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let y: Vec<u32> = (0..b * cfg.ctx).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let mut opt = AdamW::new(AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 }, model.num_params());
    let decay = DecaySegments::new(model.layout.decay_ranges());
    let mut times = [Vec::new(), Vec::new()];
    let mut ratios = Vec::new();
    for s in 0..2 * pairs + 2 {
        let v = (s + s / 2) % 2;
        DW_SPLIT.store(v, Ordering::Relaxed);
        let t0 = Instant::now();
        model.zero_grads();
        model.forward_backward(&x, &y, b, cfg.ctx, 1.0);
        opt.step(&mut model.params, &model.grads, 1e-3, &decay);
        let dt = t0.elapsed().as_secs_f64();
        if s >= 2 {
            times[v].push(dt);
            if s % 2 == 1 {
                let other = times[1 - v][times[1 - v].len() - 1];
                ratios.push(if v == 1 { dt / other } else { other / dt });
            }
        }
    }
    let (a, b) = (median(&mut times[0]), median(&mut times[1]));
    println!("A median {a:.4} s  B median {b:.4} s  paired B/A median {:.4}", median(&mut ratios));
    Ok(())
}
