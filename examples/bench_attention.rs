//! Causal attention alone, forward and backward, at the `lowcomm bench`
//! shapes (issue 13): one layer's time for several query-block sizes, so a
//! change to `src/model/ops/attention.rs` can be measured without the rest
//! of the step. Block sizes alternate inside each round; prints the median
//! over rounds (round 0 warms the buffers and is dropped).
//!
//!   cargo run --release --example bench_attention [ROUNDS=9] [PRESETS=micro,small]

use lowcomm::bench::bench_shape;
use lowcomm::model::ops::attention::{backward_blocked, forward_blocked, Dims, BLOCK};
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(9), |s| s.parse())?;
    let presets = args.next().unwrap_or_else(|| "micro,small".into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} threads, load average {}",
        rayon::current_num_threads(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!("| preset | [b, t, c, heads] | query block | forward ms | backward ms |");
    println!("|---|---|---|---|---|");
    for preset in presets.split(',') {
        let (cfg, b) = bench_shape(preset)?;
        let d = Dims::mha(b, cfg.ctx, cfg.n_embd, cfg.n_head);
        let (n, probs) = (b * d.t, b * d.heads * d.t * d.t);
        let qkv: Vec<f32> = (0..n * 3 * d.c).map(|i| (i as f32 * 0.618).sin()).collect();
        let dout: Vec<f32> = (0..n * d.c).map(|i| (i as f32 * 0.271).sin()).collect();
        let (mut out, mut p, mut scratch, mut dqkv) =
            (vec![0.0; n * d.c], vec![0.0; probs], vec![0.0; probs], vec![0.0; n * 3 * d.c]);
        let mut blocks: Vec<usize> = [16, 32, 64, 128, BLOCK, d.t].into_iter().filter(|&k| k <= d.t).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let mut times = vec![(Vec::new(), Vec::new()); blocks.len()];
        for round in 0..=rounds {
            for (&block, (fwd, bwd)) in blocks.iter().zip(&mut times) {
                let t0 = Instant::now();
                forward_blocked(&mut out, &mut p, &qkv, d, block);
                let t1 = Instant::now();
                backward_blocked(&mut dqkv, &mut scratch, &dout, &qkv, &p, d, block);
                if round > 0 {
                    fwd.push(t1.duration_since(t0).as_secs_f64() * 1e3);
                    bwd.push(t1.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        for (block, (fwd, bwd)) in blocks.iter().zip(&mut times) {
            let tag = if *block == BLOCK { " (default)" } else { "" };
            println!(
                "| {preset} | [{b}, {}, {}, {}] | {block}{tag} | {:.2} | {:.2} |",
                d.t,
                d.c,
                d.heads,
                median(fwd),
                median(bwd)
            );
        }
    }
    Ok(())
}
