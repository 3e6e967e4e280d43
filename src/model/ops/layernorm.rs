//! LayerNorm over the last dimension, forward and backward, fused.
//!
//! y = (x - mean) * rstd * w + b, with rstd = 1 / sqrt(var + eps) and the
//! biased variance (as PyTorch and GPT-2). The forward saves mean and rstd
//! per row for the backward. Written by hand because candle's LayerNorm has
//! no backward (shared/bench/RESULTS.md) and because a fused row kernel
//! touches each element twice instead of a dozen times.

use super::fastmath::{dot, sum};
use rayon::prelude::*;

/// Rows per parallel task: enough work to amortise scheduling.
pub(crate) const ROWS_PER_TASK: usize = 16;

/// Forward over `inp: [rows, c]`; writes `out: [rows, c]`, `mean`, `rstd: [rows]`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    out: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    inp: &[f32],
    w: &[f32],
    b: &[f32],
    c: usize,
    eps: f32,
) {
    let rows = inp.len() / c;
    let out = &mut out[..rows * c];
    out.par_chunks_mut(c * ROWS_PER_TASK)
        .zip(mean[..rows].par_chunks_mut(ROWS_PER_TASK))
        .zip(rstd[..rows].par_chunks_mut(ROWS_PER_TASK))
        .zip(inp.par_chunks(c * ROWS_PER_TASK))
        .for_each(|(((out, mean), rstd), inp)| {
            for (((y, m), s), x) in out.chunks_exact_mut(c).zip(mean).zip(rstd).zip(inp.chunks_exact(c)) {
                (*m, *s) = normalize_row(y, x, w, b, eps);
            }
        });
}

/// One row of the forward: `y = (x - mean) * rstd * w + b`; returns
/// `(mean, rstd)`. Shared with the fused residual kernel (`residual.rs`).
#[inline]
pub fn normalize_row(y: &mut [f32], x: &[f32], w: &[f32], b: &[f32], eps: f32) -> (f32, f32) {
    let c = x.len();
    let mu = sum(x) / c as f32;
    // two-pass variance: y holds x - mu for a moment
    for (y, x) in y.iter_mut().zip(x) {
        *y = x - mu;
    }
    let var = dot(y, y) / c as f32;
    let r = 1.0 / (var + eps).sqrt();
    for ((y, w), b) in y.iter_mut().zip(w).zip(b) {
        *y = *y * r * w + b;
    }
    (mu, r)
}

/// Backward. ACCUMULATES into `dinp` (the residual stream's gradient) and
/// into `dw`, `db` (parameter gradients accumulate over micro-batches).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    dinp: &mut [f32],
    dw: &mut [f32],
    db: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    mean: &[f32],
    rstd: &[f32],
    c: usize,
) {
    let rows = inp.len() / c;
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), with g = dout * w.
    dinp[..rows * c]
        .par_chunks_mut(c * ROWS_PER_TASK)
        .zip(dout.par_chunks(c * ROWS_PER_TASK))
        .zip(inp.par_chunks(c * ROWS_PER_TASK))
        .zip(mean.par_chunks(ROWS_PER_TASK).zip(rstd.par_chunks(ROWS_PER_TASK)))
        .for_each(|(((dx, dy), x), (mean, rstd))| {
            for ((((dx, dy), x), mu), r) in
                dx.chunks_exact_mut(c).zip(dy.chunks_exact(c)).zip(x.chunks_exact(c)).zip(mean).zip(rstd)
            {
                // g = dy * w; sums of g and g * xhat in 16 fixed lanes (vectorises,
                // same order every run), then the tail.
                let (mut acc_g, mut acc_gx) = ([0.0f32; 16], [0.0f32; 16]);
                let lanes = c / 16 * 16;
                for ((dy, x), w) in
                    dy[..lanes].chunks_exact(16).zip(x[..lanes].chunks_exact(16)).zip(w[..lanes].chunks_exact(16))
                {
                    for l in 0..16 {
                        let g = dy[l] * w[l];
                        acc_g[l] += g;
                        acc_gx[l] += g * (x[l] - mu) * r;
                    }
                }
                let (mut g_mean, mut gx_mean) = (acc_g.iter().sum::<f32>(), acc_gx.iter().sum::<f32>());
                for ((dy, x), w) in dy[lanes..].iter().zip(&x[lanes..]).zip(&w[lanes..]) {
                    let g = dy * w;
                    g_mean += g;
                    gx_mean += g * (x - mu) * r;
                }
                g_mean /= c as f32;
                gx_mean /= c as f32;
                for (((dx, dy), x), w) in dx.iter_mut().zip(dy).zip(x).zip(w) {
                    let xhat = (x - mu) * r;
                    *dx += (dy * w - g_mean - xhat * gx_mean) * r;
                }
            }
        });
    // dw = sum_rows dout * xhat, db = sum_rows dout: column blocks, rows in
    // order, so the sums are the same bits on any number of threads.
    const BLOCK: usize = 64;
    dw.par_chunks_mut(BLOCK).zip(db.par_chunks_mut(BLOCK)).enumerate().for_each(|(blk, (dw, db))| {
        let c0 = blk * BLOCK;
        let c1 = c0 + dw.len();
        for (i, (dy, x)) in dout.chunks_exact(c).zip(inp.chunks_exact(c)).enumerate() {
            let (mu, r) = (mean[i], rstd[i]);
            for (((dw, db), dy), x) in dw.iter_mut().zip(db.iter_mut()).zip(&dy[c0..c1]).zip(&x[c0..c1]) {
                *dw += dy * (x - mu) * r;
                *db += dy;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::gradcheck::{check_op, probe};

    #[test]
    fn layernorm_forward_by_hand() {
        // x = [1, 2, 3]: mean 2, var 2/3, xhat = [-1.2247, 0, 1.2247]
        let (mut y, mut m, mut r) = ([0.0; 3], [0.0], [0.0]);
        forward(&mut y, &mut m, &mut r, &[1.0, 2.0, 3.0], &[1.0, 2.0, 1.0], &[0.0, 0.5, 1.0], 3, 0.0);
        assert!((m[0] - 2.0).abs() < 1e-6);
        assert!((r[0] - 1.224_744_9).abs() < 1e-5);
        let want = [-1.224_744_9, 0.5, 2.224_744_9];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{y:?}");
        }
    }

    #[test]
    fn layernorm_backward_matches_finite_differences() {
        let (rows, c) = (5, 7);
        // inputs: x, w, b; output y. Loss = sum(y * probe).
        let x = probe(rows * c, 1.0);
        let w = probe(c, 2.0).iter().map(|v| 1.0 + v).collect::<Vec<_>>();
        let b = probe(c, 3.0);
        let run = |ins: &[Vec<f32>]| {
            let (mut y, mut m, mut r) = (vec![0.0; rows * c], vec![0.0; rows], vec![0.0; rows]);
            forward(&mut y, &mut m, &mut r, &ins[0], &ins[1], &ins[2], c, 1e-5);
            (y, (m, r))
        };
        check_op(&[x, w, b], run, |ins, dy, (m, r)| {
            let (mut dx, mut dw, mut db) = (vec![0.0; rows * c], vec![0.0; c], vec![0.0; c]);
            backward(&mut dx, &mut dw, &mut db, dy, &ins[0], &ins[1], m, r, c);
            vec![dx, dw, db]
        });
    }
}
