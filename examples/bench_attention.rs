//! A/B of causal attention alone (forward + backward of one layer at the
//! `lowcomm bench` shapes): the unblocked kernel (full T x T products, then
//! masked) against the blocked one that skips the upper triangle, and a few
//! other block sizes. Rounds alternate the variants inside one process, so a
//! shared machine's load hits all of them alike; it prints each variant's
//! median time and its per-round ratio to the unblocked one (median, range).
//!
//!   cargo run --release --example bench_attention [ROUNDS=15]

use lowcomm::bench::bench_shape;
use lowcomm::model::ops::attention::{backward_blocked, forward_blocked, Dims, BLOCK};
use std::time::Instant;

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args().nth(1).map_or(Ok(15), |s| s.parse())?;
    println!(
        "host: {} threads; rounds alternate the variants; times are fwd+bwd of one layer",
        rayon::current_num_threads()
    );
    for preset in ["micro", "small"] {
        let (cfg, b) = bench_shape(preset)?;
        let d = Dims { b, t: cfg.ctx, c: cfg.n_embd, heads: cfg.n_head };
        let n_probs = b * d.heads * d.t * d.t;
        let qkv: Vec<f32> = (0..b * d.t * 3 * d.c).map(|i| ((i as f32) * 0.618).sin()).collect();
        let dy: Vec<f32> = (0..b * d.t * d.c).map(|i| ((i as f32) * 0.377).cos()).collect();
        let (mut y, mut p) = (vec![0.0; b * d.t * d.c], vec![0.0; n_probs]);
        let (mut dqkv, mut scratch) = (vec![0.0; qkv.len()], vec![0.0; n_probs]);
        // variant 0 is the baseline: one block of all t rows = no skipping
        let blocks = [d.t, BLOCK, 32, 96];
        let mut times = vec![Vec::new(); blocks.len()];
        for r in 0..rounds + 1 {
            for (v, &blk) in blocks.iter().enumerate() {
                let t0 = Instant::now();
                forward_blocked(&mut y, &mut p, &qkv, d, blk);
                backward_blocked(&mut dqkv, &mut scratch, &dy, &qkv, &p, d, blk);
                if r > 0 {
                    times[v].push(t0.elapsed().as_secs_f64()); // round 0 warms the buffers
                }
            }
        }
        println!("\n{preset}: b={b} t={} c={} heads={}", d.t, d.c, d.heads);
        println!("| block | ms (median) | ratio to unblocked: median | range |\n|---|---|---|---|");
        for (v, &blk) in blocks.iter().enumerate() {
            let mut ratio: Vec<f64> = times[v].iter().zip(&times[0]).map(|(a, b)| a / b).collect();
            ratio.sort_by(f64::total_cmp);
            let name = if v == 0 {
                format!("{blk} (unblocked)")
            } else if blk == BLOCK {
                format!("{blk} (chosen)")
            } else {
                blk.to_string()
            };
            println!(
                "| {name} | {:.2} | {:.3} | {:.3}..{:.3} |",
                1e3 * median(&times[v]),
                median(&ratio),
                ratio[0],
                ratio[ratio.len() - 1]
            );
        }
    }
    Ok(())
}
