//! The linear layers' products alone, at the `lowcomm bench` shapes
//! (issue 13): per layer, the forward product and the backward's two (dX =
//! dY W, dW += dY^T X), as `src/model/ops/matmul.rs` runs them (one product
//! on the pool's threads) and split for 2 threads by hand (the forward's
//! rows in two halves, the backward's two products side by side, each
//! single-threaded), with GFLOP/s next to the 2-core peak measured in the
//! same run. It shows how close the products are to the machine, and where
//! gemm's own threading loses to a split of ours.
//!
//!   cargo run --release --example bench_linear [ROUNDS=9] [PRESET=small]
//!
//! gemm's packing thresholds can be set for a run (all tried in issue 13,
//! none beat the defaults): RHS_PACK, LHS_PACK (multi-thread), LHS_PACK1
//! (single-thread), e.g. `RHS_PACK=256 cargo run ...`. The AVX2 path on an
//! AVX-512 host: `CARGO_TARGET_DIR=target/avx2 cargo run --release
//! --no-default-features --example bench_linear`.

use lowcomm::bench::bench_shape;
use lowcomm::bench::breakdown::gemm_peak;
use lowcomm::model::ops::matmul::{gemm, Threads, View};
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Read `v` once, so that the product after finds it in cache.
fn warm(v: &[f32]) {
    std::hint::black_box(v.iter().sum::<f32>());
}

/// The six timings of one round, in the table's column order.
const COLUMNS: [&str; 6] = ["fwd pooled", "fwd halves", "bwd pooled", "bwd side by side", "dX pooled", "dW pooled"];

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(9), |s| s.parse())?;
    let preset = args.next().unwrap_or_else(|| "small".into());
    let knob = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    if let Some(v) = knob("RHS_PACK") {
        gemm::set_rhs_packing_threshold(v)
    }
    if let Some(v) = knob("LHS_PACK") {
        gemm::set_lhs_packing_threshold_multi_thread(v)
    }
    if let Some(v) = knob("LHS_PACK1") {
        gemm::set_lhs_packing_threshold_single_thread(v)
    }
    let (cfg, b) = bench_shape(&preset)?;
    let (n, c) = (b * cfg.ctx, cfg.n_embd);
    let threads = rayon::current_num_threads();
    let peak = gemm_peak(512, 12);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{preset}: {n} tokens, {threads} threads, single-core GEMM peak {peak:.1} GFLOP/s, load average {}",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!("median ms (GFLOP/s, % of {threads} x peak) over {rounds} rounds\n");
    println!("| layer [n x c] x [c x oc] | {} |", COLUMNS.join(" | "));
    println!("|---{}|", "|---".repeat(COLUMNS.len()));
    let layers = [
        ("qkv", c, 3 * c),
        ("attn-proj", c, c),
        ("fc", c, 4 * c),
        ("fc-proj", 4 * c, c),
        ("lm-head", c, cfg.vocab_size),
    ];
    for (name, c, oc) in layers {
        let x: Vec<f32> = (0..n * c).map(|i| (i as f32 * 0.618).sin()).collect();
        let w: Vec<f32> = (0..oc * c).map(|i| (i as f32 * 0.271).sin()).collect();
        let dy: Vec<f32> = (0..n * oc).map(|i| (i as f32 * 0.377).sin()).collect();
        let (mut y, mut dx, mut dw) = (vec![0.0f32; n * oc], vec![0.0f32; n * c], vec![0.0f32; oc * c]);
        let (x, w, dy) = (&x[..], &w[..], &dy[..]);
        let forward = |y: &mut [f32], x: &[f32], rows: usize, threads| {
            gemm(y, oc, View::rows(x, c), View::transposed(w, c), rows, oc, c, false, threads)
        };
        let grad_x =
            |dx: &mut [f32], threads| gemm(dx, c, View::rows(dy, oc), View::rows(w, c), n, c, oc, false, threads);
        let grad_w =
            |dw: &mut [f32], threads| gemm(dw, c, View::transposed(dy, oc), View::rows(x, c), oc, c, n, true, threads);
        let mut times = vec![Vec::new(); COLUMNS.len()];
        for round in 0..=rounds {
            let t0 = Instant::now();
            forward(&mut y, x, n, Threads::Pool);
            let t1 = Instant::now();
            let (y0, y1) = y.split_at_mut(n / 2 * oc);
            let (x0, x1) = x.split_at(n / 2 * c);
            rayon::join(|| forward(y0, x0, n / 2, Threads::One), || forward(y1, x1, n - n / 2, Threads::One));
            // In the step, dY was just written by the layer above: bring it
            // into cache before each backward, so that the second variant
            // does not find it where the first left it (it won by that alone).
            warm(dy);
            let t2 = Instant::now();
            grad_x(&mut dx, Threads::Pool);
            let t3 = Instant::now();
            grad_w(&mut dw, Threads::Pool);
            let t4 = Instant::now();
            warm(dy);
            let t4b = Instant::now();
            rayon::join(|| grad_x(&mut dx, Threads::One), || grad_w(&mut dw, Threads::One));
            let t5 = Instant::now();
            if round > 0 {
                let d = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64();
                let round_times = [d(t0, t1), d(t1, t2), d(t2, t4), d(t4b, t5), d(t2, t3), d(t3, t4)];
                times.iter_mut().zip(round_times).for_each(|(v, t)| v.push(t));
            }
        }
        let gflop = 2.0 * (n * c * oc) as f64 / 1e9;
        let cells: Vec<String> = times
            .iter_mut()
            .zip([1.0, 1.0, 2.0, 2.0, 1.0, 1.0])
            .map(|(v, products)| {
                let s = median(v);
                let rate = products * gflop / s;
                format!("{:.2} ({rate:.0}, {:.0}%)", s * 1e3, 100.0 * rate / (peak * threads as f64))
            })
            .collect();
        println!("| {name} [{n} x {c}] x [{c} x {oc}] | {} |", cells.join(" | "));
    }
    Ok(())
}
