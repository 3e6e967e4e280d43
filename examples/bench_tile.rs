//! `tile::product` against gemm on attention's block shapes, operands hot in
//! cache (issue 13, the unpacked attention kernel): GFLOP/s of one thread.
//!
//!   cargo run --release --example bench_tile
use lowcomm::model::ops::matmul::{gemm, Threads, View};
use lowcomm::model::ops::tile::product;
use std::time::Instant;
fn main() {
    for &(m, n, k, ldb) in &[
        (32usize, 64usize, 256usize, 64usize),
        (32, 256, 64, 272),
        (256, 64, 32, 64),
        (32, 64, 256, 1536),
        (32, 256, 64, 256),
    ] {
        let a: Vec<f32> = (0..m * k.max(m) * 4).map(|i| (i as f32 * 0.1).sin()).collect();
        let b: Vec<f32> = (0..k * ldb + n).map(|i| (i as f32 * 0.3).sin()).collect();
        let mut c = vec![0.0f32; m * n];
        let reps = 20000;
        let flops = 2.0 * (m * n * k) as f64 * reps as f64;
        let t0 = Instant::now();
        for _ in 0..reps {
            product(&mut c, n, View::rows(&a, k), &b, ldb, m, n, k, false);
        }
        let tt = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        for _ in 0..reps {
            gemm(&mut c, n, View::rows(&a, k), View::rows(&b, ldb), m, n, k, false, Threads::One);
        }
        let tg = t0.elapsed().as_secs_f64();
        println!("m{m} n{n} k{k} ldb{ldb}: tile {:.1} GFLOP/s, gemm {:.1}", flops / tt / 1e9, flops / tg / 1e9);
    }
}
