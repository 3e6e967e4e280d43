//! RMSNorm over the last dimension (Llama's norm), forward and backward.
//!
//! y = x * rstd * w, with rstd = 1 / sqrt(mean(x^2) + eps): no centring and
//! no bias. The forward saves rstd per row for the backward.

use super::fastmath::dot;
use super::layernorm::ROWS_PER_TASK;
use rayon::prelude::*;

/// Forward over `inp: [rows, c]`; writes `out: [rows, c]` and `rstd: [rows]`.
pub fn forward(out: &mut [f32], rstd: &mut [f32], inp: &[f32], w: &[f32], c: usize, eps: f32) {
    let rows = inp.len() / c;
    out[..rows * c]
        .par_chunks_mut(c * ROWS_PER_TASK)
        .zip(rstd[..rows].par_chunks_mut(ROWS_PER_TASK))
        .zip(inp.par_chunks(c * ROWS_PER_TASK))
        .for_each(|((out, rstd), inp)| {
            for ((y, s), x) in out.chunks_exact_mut(c).zip(rstd).zip(inp.chunks_exact(c)) {
                let r = 1.0 / (dot(x, x) / c as f32 + eps).sqrt();
                for ((y, x), w) in y.iter_mut().zip(x).zip(w) {
                    *y = x * r * w;
                }
                *s = r;
            }
        });
}

/// Backward. ACCUMULATES into `dinp` (the residual stream's gradient) and
/// into `dw` (parameter gradients accumulate over micro-batches).
///
/// With xhat = x * rstd and g = dy * w:
/// dx = rstd * (g - xhat * mean(g * xhat)), dw = sum_rows dy * xhat.
#[allow(clippy::too_many_arguments)]
pub fn backward(dinp: &mut [f32], dw: &mut [f32], dout: &[f32], inp: &[f32], w: &[f32], rstd: &[f32], c: usize) {
    let rows = inp.len() / c;
    dinp[..rows * c]
        .par_chunks_mut(c * ROWS_PER_TASK)
        .zip(dout.par_chunks(c * ROWS_PER_TASK))
        .zip(inp.par_chunks(c * ROWS_PER_TASK))
        .zip(rstd.par_chunks(ROWS_PER_TASK))
        .for_each(|(((dx, dy), x), rstd)| {
            for (((dx, dy), x), r) in dx.chunks_exact_mut(c).zip(dy.chunks_exact(c)).zip(x.chunks_exact(c)).zip(rstd) {
                // mean(g * xhat) = rstd * sum(dy * w * x) / c, in a fixed order
                let mut acc = 0.0f32;
                for ((dy, x), w) in dy.iter().zip(x).zip(w) {
                    acc += dy * w * x;
                }
                let gx_mean = acc * r / c as f32;
                for (((dx, dy), x), w) in dx.iter_mut().zip(dy).zip(x).zip(w) {
                    *dx += (dy * w - x * r * gx_mean) * r;
                }
            }
        });
    // dw: column blocks, rows in order (the same bits on any number of threads).
    const BLOCK: usize = 64;
    dw.par_chunks_mut(BLOCK).enumerate().for_each(|(blk, dw)| {
        let c0 = blk * BLOCK;
        let c1 = c0 + dw.len();
        for ((dy, x), r) in dout.chunks_exact(c).zip(inp.chunks_exact(c)).zip(rstd) {
            for ((dw, dy), x) in dw.iter_mut().zip(&dy[c0..c1]).zip(&x[c0..c1]) {
                *dw += dy * x * r;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::gradcheck::{check_op, probe};

    #[test]
    fn rmsnorm_forward_by_hand() {
        // x = [1, 2, 2]: mean(x^2) = 3, rstd = 1/sqrt(3); w = [1, 2, 0.5]
        let (mut y, mut r) = ([0.0; 3], [0.0]);
        forward(&mut y, &mut r, &[1.0, 2.0, 2.0], &[1.0, 2.0, 0.5], 3, 0.0);
        let s = 1.0 / 3f32.sqrt();
        assert!((r[0] - s).abs() < 1e-6);
        for (a, b) in y.iter().zip([s, 4.0 * s, s]) {
            assert!((a - b).abs() < 1e-6, "{y:?}");
        }
    }

    #[test]
    fn rmsnorm_backward_matches_finite_differences() {
        let (rows, c) = (5, 7);
        let x = probe(rows * c, 1.0);
        let w = probe(c, 2.0).iter().map(|v| 1.0 + v).collect::<Vec<_>>();
        let run = |ins: &[Vec<f32>]| {
            let (mut y, mut r) = (vec![0.0; rows * c], vec![0.0; rows]);
            forward(&mut y, &mut r, &ins[0], &ins[1], c, 1e-5);
            (y, r)
        };
        check_op(&[x, w], run, |ins, dy, r| {
            let (mut dx, mut dw) = (vec![0.0; rows * c], vec![0.0; c]);
            backward(&mut dx, &mut dw, dy, &ins[0], &ins[1], r, c);
            vec![dx, dw]
        });
    }
}
